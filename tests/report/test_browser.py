"""The report in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by
selenium): the CSP-guarded page runs its own script only, the charts render, the trajectory browser
switches, tokens are coloured, hostile text stays text. Skipped when no browser is installed."""

import re
import shutil

import pytest

from agentrl.explain.report import write_report
from tests.report.helpers import add_hostile_trajectory

pytestmark = pytest.mark.browser


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    binary = next(
        (p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))), None
    )
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("no headless Chromium (apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:  # an explicit driver path: selenium never tries to download one
        driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    except WebDriverException as e:
        pytest.skip(f"Chromium would not start: {e.msg}")
    yield driver
    driver.quit()


def _rgb(css: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", css)[:3])


def test_report_in_headless_chromium(browser, request, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run_copy = request.getfixturevalue("run_copy")  # only now: a skipped browser costs no training run

    add_hostile_trajectory(run_copy)
    page = write_report(run_copy, tmp_path / "report.html", max_trajectories=20)
    browser.get(page.as_uri())
    d = browser
    # the hostile trajectory ran nothing: no alert, the title is ours, no injected element exists
    with pytest.raises(NoAlertPresentException):
        d.switch_to.alert.text  # noqa: B018
    assert d.title.startswith("agentrl run report") and d.execute_script("return document.images.length") == 0
    # no console errors: a style or script blocked by the CSP (a wrong hash) would log one
    assert [e for e in d.get_log("browser") if e["level"] == "SEVERE"] == []
    assert _rgb(d.find_element(By.TAG_NAME, "header").value_of_css_property("background-color")) == (
        29,
        43,
        58,
    )
    assert "js" in d.find_element(By.TAG_NAME, "body").get_attribute("class")

    charts = d.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert len(charts) >= 8 and all(c.size["width"] > 200 and c.size["height"] > 100 for c in charts)
    assert len(d.find_elements(By.CSS_SELECTOR, "svg.chart polyline")) >= 10

    def shown():
        arts = [a for a in d.find_elements(By.CSS_SELECTOR, "article.traj") if a.is_displayed()]
        assert len(arts) == 1
        return arts[0]

    first = shown()
    assert first.get_attribute("data-step") == "1"
    links = [a for a in d.find_elements(By.CSS_SELECTOR, "ul.tl a") if a.is_displayed()]
    assert len(links) == 7  # step 1: 6 trajectories of the run + the hostile one
    links[2].click()
    assert shown().get_attribute("id") == links[2].get_attribute("data-target") != first.get_attribute("id")
    assert "current" in links[2].get_attribute("class")
    assert d.execute_script("return location.hash") == "#" + links[2].get_attribute("data-target")
    Select(d.find_element(By.ID, "step-select")).select_by_value("2")
    art = shown()
    assert art.get_attribute("data-step") == "2"
    visible = [u for u in d.find_elements(By.CSS_SELECTOR, "ul.tl") if u.is_displayed()]
    assert [u.get_attribute("data-step") for u in visible] == ["2"]
    d.find_element(By.TAG_NAME, "body").send_keys("k")  # back to the last trajectory of step 1
    assert shown().get_attribute("data-step") == "1"

    # tokens: blue above 0, red below, greyed where masked
    d.find_element(By.TAG_NAME, "body").send_keys("j")
    art = shown()
    pos = art.find_elements(By.CSS_SELECTOR, ".tokens span[class^=p]")
    neg = art.find_elements(By.CSS_SELECTOR, ".tokens span[class^=n]")
    assert pos or neg
    for span in pos[:5]:
        r, _, b = _rgb(span.value_of_css_property("background-color"))
        assert b > r
    for span in neg[:5]:
        r, _, b = _rgb(span.value_of_css_property("background-color"))
        assert r > b
    masked = art.find_elements(By.CSS_SELECTOR, ".msg.masked")
    assert masked and _rgb(masked[0].value_of_css_property("background-color")) == (243, 244, 246)
    assert "A " in (pos or neg)[0].get_attribute("title")

    d.set_window_size(1400, 2400)
    d.execute_script("document.getElementById('trajectories').scrollIntoView()")
    shot = tmp_path / "report.png"
    assert d.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
