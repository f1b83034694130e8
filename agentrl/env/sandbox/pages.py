"""Render the sandbox world as web pages: official releases (HTML), filings and annual reports
(PDF-like text), news, analyst previews that predict, and gossip pages with wild claims."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from agentrl.env.sandbox.world import YEARS, Company, Quarter, money, poss

__all__ = ["OFFICIAL_KINDS", "ORDINAL", "render_company", "source_ids"]

#: Page kinds the company itself publishes (its results release, its filing, its annual report);
#: the other kinds are ``news``, analyst ``preview`` s and ``gossip``.
OFFICIAL_KINDS = frozenset({"official", "filing", "annual"})
ORDINAL = {1: "First", 2: "Second", 3: "Third", 4: "Fourth"}
_NEWS = ["finwire-news.example", "marketledger.example", "dailyticker.example"]
_PREVIEW = ["streetview-analysts.example", "consensus-desk.example"]
_GOSSIP = ["buzzstock-gossip.example", "tipsandwhispers.example", "moonshot-forum.example"]


def source_ids(c: Company, qt: Quarter) -> dict[str, str]:
    """Cite keys of the pages about one quarter."""
    tag = f"q{qt.q}-{qt.year}"
    return {
        "official": f"{c.slug}-{tag}",
        "filing": f"{c.slug}-10q-{tag}",
        "news": f"news-{c.slug}-{tag}",
        "preview": f"preview-{c.slug}-{tag}",
        "gossip": f"gossip-{c.slug}-{tag}",
    }


def _html(title: str, paragraphs: list[str], site: str) -> str:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        f"<html><head><title>{title}</title><script>var t='{site}';</script></head>"
        f"<body><nav>{site} | Home | Investors | Contact</nav><article><h1>{title}</h1>{body}</article>"
        f"<footer>© {site}</footer></body></html>"
    )


def _doc(
    id_: str, url: str, title: str, date: dt.date, kind: str, body: str, ctype: str = "text/html"
) -> dict[str, Any]:
    return {
        "id": id_,
        "url": url,
        "title": title,
        "date": date.isoformat(),
        "content_type": ctype,
        "kind": kind,
        "body": body,
    }


def _quarter_pages(c: Company, qt: Quarter, rng: random.Random) -> list[dict[str, Any]]:
    ids = source_ids(c, qt)
    ir = f"https://ir.{c.slug}.example"
    label, ordq = qt.label, ORDINAL[qt.q]
    pages = []
    title = f"{c.name} Announces {ordq} Quarter {qt.year} Results"
    paras = [
        f"{c.name} ({c.ticker}) today announced financial results for the quarter ended "
        f"{ {1: 'March 31', 2: 'June 30', 3: 'September 30', 4: 'December 31'}[qt.q] }, {qt.year} ({label}).",
        f"Total revenue for {label} was {money(qt.revenue)}. {c.segment} revenue was {money(qt.segment_revenue)}.",
        f"Net income for {label} was {money(qt.net_income)}.",
        f'"We are pleased with our {ordq.lower()} quarter," said {c.ceo}, Chief Executive Officer.',
    ]
    if qt.q == 4:
        paras.insert(2, f"Full-year {qt.year} revenue was {money(c.full_year(qt.year))}.")
    paras.append(
        "This release is the official source of these figures. Forward-looking statements involve risks."
    )
    pages.append(
        _doc(
            ids["official"],
            f"{ir}/news/{qt.year}-q{qt.q}-results",
            title,
            qt.release,
            "official",
            _html(title, paras, f"ir.{c.slug}.example"),
        )
    )
    ftitle = f"{c.name} Form 10-Q for {label}"
    ftext = (
        f"{c.name.upper()}\nQUARTERLY REPORT ({label})\n\nCondensed consolidated statements of income\n"
        f"Revenues: {money(qt.revenue)}\nof which {c.segment}: {money(qt.segment_revenue)}\n"
        f"Net income: {money(qt.net_income)}\n\f\nRisk factors\nOur results may vary from quarter to quarter."
    )
    pages.append(
        _doc(
            ids["filing"],
            f"{ir}/filings/{qt.year}-q{qt.q}-10q.pdf",
            ftitle,
            qt.filing,
            "filing",
            ftext,
            "application/pdf",
        )
    )
    site = rng.choice(_NEWS)
    ntitle = f"{c.name} reports {label} revenue of {money(qt.revenue)}"
    nday = qt.release + dt.timedelta(days=rng.randint(0, 2))
    pages.append(
        _doc(
            ids["news"],
            f"https://www.{site}/{nday:%Y/%m}/{c.slug}-q{qt.q}-{qt.year}-earnings",
            ntitle,
            nday,
            "news",
            _html(
                ntitle,
                [
                    f"{c.name} said revenue reached {money(qt.revenue)} in {label}, with {c.segment} "
                    f"contributing {money(qt.segment_revenue)}.",
                    f"Shares of {c.ticker} moved {rng.choice(['higher', 'lower'])} after the release.",
                ],
                site,
            ),
        )
    )
    site = rng.choice(_PREVIEW)
    ptitle = f"Preview: what to expect from {poss(c.name)} {label} results"
    pages.append(
        _doc(
            ids["preview"],
            f"https://{site}/previews/{c.slug}-q{qt.q}-{qt.year}",
            ptitle,
            qt.preview,
            "preview",
            _html(
                ptitle,
                [
                    f"Ahead of {poss(c.name)} {label} report, our analysts predict revenue of about "
                    f"{money(qt.preview_revenue)} and {c.segment} revenue near {money(qt.preview_segment)}.",
                    "These are estimates, not reported results.",
                ],
                site,
            ),
        )
    )
    site = rng.choice(_GOSSIP)
    gtitle = f"INSIDER: {c.name} {label} numbers will SHOCK everyone"
    pages.append(
        _doc(
            ids["gossip"],
            f"https://{site}/t/{c.slug}-{qt.year}-q{qt.q}-{rng.randint(1000, 9999)}",
            gtitle,
            qt.gossip,
            "gossip",
            _html(
                gtitle,
                [
                    f"A friend of a friend at {c.name} says {label} revenue is really {money(qt.gossip_revenue)}!!!",
                    f"{c.segment} is secretly the biggest business on earth. You heard it here first.",
                ],
                site,
            ),
        )
    )
    return pages


def _year_pages(c: Company, year: int, rng: random.Random) -> list[dict[str, Any]]:
    ir = f"https://ir.{c.slug}.example"
    fy = c.full_year(year)
    seg = round(sum(c.quarter(year, q).segment_revenue for q in range(1, 5)), 1)
    net = round(sum(c.quarter(year, q).net_income for q in range(1, 5)), 1)
    atitle = f"{c.name} Annual Report {year}"
    atext = (
        f"{c.name.upper()}\nANNUAL REPORT {year}\n\nLetter to shareholders from {c.ceo}\n\f\n"
        f"Full-year {year} revenue: {money(fy)}\n{c.segment} revenue: {money(seg)}\nNet income: {money(net)}\n"
    )
    pdate, pval = c.fy_preview[year]
    gdate, gval = c.fy_gossip[year]
    psite, gsite = rng.choice(_PREVIEW), rng.choice(_GOSSIP)
    ptitle = f"{c.name} full-year {year} outlook: analysts' forecast"
    gtitle = f"{c.name} {year} revenue to top {money(gval)}, says anonymous source"
    return [
        _doc(
            f"{c.slug}-annual-{year}",
            f"{ir}/reports/annual-{year}.pdf",
            atitle,
            c.annual_report[year],
            "annual",
            atext,
            "application/pdf",
        ),
        _doc(
            f"preview-{c.slug}-fy-{year}",
            f"https://{psite}/outlook/{c.slug}-{year}",
            ptitle,
            pdate,
            "preview",
            _html(
                ptitle,
                [
                    f"We forecast {poss(c.name)} full-year {year} revenue at {money(pval)}.",
                    "This is a prediction; the company has not reported its full-year results.",
                ],
                psite,
            ),
        ),
        _doc(
            f"gossip-{c.slug}-fy-{year}",
            f"https://{gsite}/t/{c.slug}-{year}-fy-{rng.randint(1000, 9999)}",
            gtitle,
            gdate,
            "gossip",
            _html(
                gtitle, [f"Sources say {poss(c.name)} {year} revenue will be {money(gval)}. Buy now!"], gsite
            ),
        ),
    ]


def render_company(c: Company, rng: random.Random) -> list[dict[str, Any]]:
    """Every page about one company, in a fixed order."""
    pages: list[dict[str, Any]] = []
    for qt in c.quarters:
        pages.extend(_quarter_pages(c, qt, rng))
    for year in YEARS:
        pages.extend(_year_pages(c, year, rng))
    return pages
