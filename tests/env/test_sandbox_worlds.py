"""Sandbox worlds (``build(..., worlds=W)``, ``worlds:`` in ``sandbox.yaml``): many companies cut into
separate webs, each task researching its own world alone. Issue 36's fresh worlds: a run trains on
hundreds of companies, each seen rarely, while every episode searches a web of a few."""

from __future__ import annotations

import json

import pytest

from agentrl.env import ResearchEnv
from agentrl.env.backends.base import ToolFailure
from agentrl.env.backends.cache import cache_key
from agentrl.env.backends.sandbox import SandboxBackend
from agentrl.env.sandbox import build, excluded_stems
from agentrl.env.sandbox.world import make_world
from agentrl.env.suite import load_suite
from agentrl.errors import ConfigError

from .conftest import call


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    root = tmp_path_factory.mktemp("worlds") / "w"
    build(root, seed=5, companies=2, heldout=2, worlds=3)
    return root


def _company(task) -> str:  # type: ignore[no-untyped-def]
    """A task's company slug (its id's first part: ``sylusphere-q2-2021-revenue``)."""
    return task.id.split("-")[0]


def test_each_world_holds_its_companies_pages_and_tasks(web):
    tasks, pages = _lines(web / "tasks.jsonl"), _lines(web / "corpus.jsonl")
    slugs = [c.slug for c in make_world(5, 8)]  # 3 worlds of 2, then the 2 held-out in a fourth
    world_of = {slug: f"w{i // 2}" for i, slug in enumerate(slugs)}
    assert {t["world"] for t in tasks} == {"w0", "w1", "w2", "w3"}
    for t in tasks:
        assert t["world"] == world_of[t["id"].split("-")[0]]
        assert (t.get("split") == "heldout") == (t["world"] == "w3")
    for p in pages:  # a page names its company's slug in its URL
        assert p["world"] == next(w for s, w in world_of.items() if s in p["url"])
    assert len(tasks) == 8 * 11 and sum(t["world"] == "w1" for t in tasks) == 22


def test_one_world_builds_the_files_as_before(tmp_path):
    build(tmp_path / "a", seed=5, companies=3, worlds=1)
    build(tmp_path / "b", seed=5, companies=3)
    for name in ("tasks.jsonl", "corpus.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert "world" not in (tmp_path / "a" / name).read_text()


def test_a_task_searches_and_opens_its_own_world_alone(web):
    suite = load_suite(web)
    backend = SandboxBackend(suite.corpus_path)
    task = next(t for t in suite.tasks if t.world == "w0")
    other = next(t for t in suite.tasks if t.world == "w1" and t.family == task.family)
    query = other.prompt  # names a company of another world
    everywhere = {h.url for h in backend.search(query, 20)}
    mine = {h.url for h in backend.search(query, 20, world="w0")}
    theirs = _company(other)
    assert any(theirs in u for u in everywhere) and not any(theirs in u for u in mine)
    w0 = {p["url"] for p in _lines(web / "corpus.jsonl") if p["world"] == "w0"}
    assert mine and mine <= w0
    url = other.ground_truth["official"]["url"]
    assert backend.fetch(url).url == url
    assert backend.fetch(url, world="w1").url == url
    with pytest.raises(ToolFailure, match="404"):
        backend.fetch(url, world="w0")
    assert backend.search(query, 20, world="w9") == []  # a world the corpus does not have: nothing


def test_the_env_scopes_its_tools_to_the_task_world(web):
    suite = load_suite(web)
    task = next(t for t in suite.tasks if t.world == "w2")
    other = next(t for t in suite.tasks if t.world == "w0")
    env = ResearchEnv({"suite": str(web)})
    env.reset(seed=0, options={"task": task.id})
    obs, *_ = env.step(call("search", query=other.prompt))
    assert _company(other) not in obs
    obs, *_, info = env.step(call("open_url", url=other.ground_truth["official"]["url"]))
    assert "404" in obs and info["tool_errors"] == 1
    obs, *_ = env.step(call("open_url", url=task.ground_truth["official"]["url"]))
    assert "404" not in obs


def test_a_world_is_part_of_a_recorded_call_key():
    import datetime as dt

    day = dt.date(2023, 1, 1)
    plain = cache_key("search", {"query": "q", "k": 4}, day)
    assert cache_key("search", {"query": "q", "k": 4, "world": None}, day) == plain  # keys as before
    assert cache_key("search", {"query": "q", "k": 4, "world": "w1"}, day) != plain
    assert cache_key("fetch", {"url": "https://a.example/x", "world": "w1"}, day) != cache_key(
        "fetch", {"url": "https://a.example/x", "world": "w2"}, day
    )


def _suite_of(spec: str, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """The suite a directory holding only ``sandbox.yaml`` (``spec``) builds, in a cache of the test's."""
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path / "cache"))
    suite_dir = tmp_path / "suite"
    suite_dir.mkdir()
    (suite_dir / "sandbox.yaml").write_text(spec)
    return load_suite(suite_dir)


def test_sandbox_yaml_builds_worlds_that_name_no_excluded_company(tmp_path, monkeypatch):
    suite = _suite_of("seed: 0\ncompanies: 3\nworlds: 4\nexclude_worlds: [[0, 6]]\n", tmp_path, monkeypatch)
    assert len(suite.tasks) == 4 * 3 * 11 and {t.world for t in suite.tasks} == {"w0", "w1", "w2", "w3"}
    drawn = {t.prompt for t in suite.tasks}
    banned = excluded_stems([(0, 6)])
    assert len(banned) == 6 and not any(stem in p for stem in banned for p in drawn)
    assert "Ostionline" in banned  # the quickstart's first company: a seed-0 world would draw it
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "sandbox.yaml").write_text("seed: 0\ncompanies: 3\nexclude_worlds: [0, 6]\n")
    with pytest.raises(ConfigError, match=r"exclude_worlds: expected a list of \[seed, companies\] pairs"):
        load_suite(bad)


def test_sandbox_yaml_draws_syllable_names(tmp_path, monkeypatch):
    from agentrl.env.sandbox.world import sandbox_stems

    suite = _suite_of("seed: 1\ncompanies: 2\nworlds: 3\nnames: syllables\n", tmp_path, monkeypatch)
    stems = {
        t.prompt.split("What was ")[-1].split()[0] for t in suite.tasks if t.prompt.startswith("What was")
    }
    assert len(stems) == 6 and not stems & sandbox_stems()
    assert suite.root.name.endswith("-w3-syllables")  # cached apart from a sandbox-named build


def test_worlds_and_the_long_horizon_families_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="worlds"):
        build(tmp_path / "x", seed=0, companies=2, worlds=2, long_horizon=True)


def test_the_cli_builds_the_same_worlds(tmp_path):
    from agentrl.cli import main

    assert main(["sandbox", "build", "--seed", "0", "--companies", "3", "--worlds", "4", "--exclude-world", "0,6",
                 "--out", str(tmp_path / "cli")]) == 0  # fmt: skip
    build(tmp_path / "api", seed=0, companies=3, worlds=4, exclude=excluded_stems([(0, 6)]))
    assert (tmp_path / "cli" / "tasks.jsonl").read_bytes() == (tmp_path / "api" / "tasks.jsonl").read_bytes()
    assert "Ostionline" not in (tmp_path / "cli" / "tasks.jsonl").read_text()
    assert (
        main(["sandbox", "build", "--companies", "2", "--names", "syllables", "--out", str(tmp_path / "syl")])
        == 0
    )
    build(tmp_path / "syl-api", seed=0, companies=2, names="syllables")
    assert (tmp_path / "syl" / "tasks.jsonl").read_bytes() == (
        tmp_path / "syl-api" / "tasks.jsonl"
    ).read_bytes()


def test_the_cli_refuses_an_unknown_name_scheme(tmp_path, capsys):
    from agentrl.cli import main

    assert main(["sandbox", "build", "--names", "greek", "--out", str(tmp_path / "x")]) != 0
    assert "--names greek: expected one of sandbox, syllables" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
