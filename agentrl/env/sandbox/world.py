"""The sandbox world: fictional companies and their quarterly figures, drawn from one seed.

Everything is a pure function of ``(seed, companies)``: the same arguments give the same world on
every machine (``random.Random``, no hash-order dependence). Figures are in billions of US dollars
with one decimal, the way releases print them.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Collection
from dataclasses import dataclass, field

__all__ = [
    "MONEY",
    "NAME_SCHEMES",
    "YEARS",
    "Company",
    "Quarter",
    "make_world",
    "money",
    "poss",
    "sandbox_stems",
]

YEARS = (2021, 2022, 2023, 2024, 2025)

_PREFIX = [
    "Vel",
    "Kor",
    "Zan",
    "Mir",
    "Tal",
    "Quen",
    "Bram",
    "Sol",
    "Dra",
    "Fen",
    "Gal",
    "Hol",
    "Ister",
    "Jun",
    "Lum",
    "Nor",
    "Oct",
    "Pax",
    "Ryn",
    "Syl",
    "Tor",
    "Umb",
    "Vor",
    "Wex",
    "Yar",
    "Zel",
    "Cal",
    "Ost",
    "Ner",
    "Arc",
]
_MIDDLE = ["a", "o", "i", "e", "u", "ara", "ion", "ex", "or", "an", "ith", "ova"]
_SUFFIX = [
    "tek",
    "dyne",
    "lume",
    "vox",
    "nova",
    "grid",
    "mark",
    "core",
    "works",
    "fold",
    "path",
    "sphere",
    "line",
    "forge",
]
# The ``syllables`` name scheme: stems of 2-3 random syllables, a space of millions that shares no stem
# with the sandbox's 5,040 (``sandbox_stems``), for worlds that must never name a sandbox company
# (the research base's pretraining worlds, ``agentrl.learn.bases``).
_ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "qu", "r", "s", "t", "v", "w", "z",
           "br", "cr", "dr", "gl", "pl", "st", "tr", "th", "sh"]  # fmt: skip
_VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "io", "y"]
_CODAS = ["", "", "", "", "", "n", "r", "l", "x", "s", "m", "k", "nd"]

#: How a world's company names are drawn: the sandbox's pieces, or random syllables.
NAME_SCHEMES = ("sandbox", "syllables")


def sandbox_stems() -> frozenset[str]:
    """Every stem the ``sandbox`` scheme can draw (prefix + middle + suffix: 5,040)."""
    return frozenset(p + m + s for p in _PREFIX for m in _MIDDLE for s in _SUFFIX)


def _sandbox_stem(rng: random.Random) -> str:
    return rng.choice(_PREFIX) + rng.choice(_MIDDLE) + rng.choice(_SUFFIX)


def _syllable_stem(rng: random.Random) -> str:
    n = rng.choice((2, 2, 3))
    stem = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(n))
    return stem[:1].upper() + stem[1:]


_FORMS = ["Systems", "Holdings", "Technologies", "Group", "Industries", "Labs", "Networks", "Corp"]
_SEGMENTS = [
    "Cloud",
    "Devices",
    "Advertising",
    "Payments",
    "Subscriptions",
    "Logistics",
    "Energy",
    "Semiconductors",
]


def poss(name: str) -> str:
    """The possessive of a name: ``Acme Corp's``, ``Vela Systems'``."""
    return name + ("'" if name.endswith("s") else "'s")


#: What ``money`` prints, as a regex.
MONEY = re.compile(r"\$\d+(?:\.\d+)? (?:billion|trillion)")


def money(billions: float) -> str:
    """How a figure is printed: ``$12.3 billion``, or ``$4.7 trillion`` from a thousand billion up."""
    if billions >= 1000:
        return f"${billions / 1000:.1f} trillion"
    return f"${billions:.1f} billion"


@dataclass
class Quarter:
    """One reported quarter: its figures and when they became public."""

    year: int
    q: int
    revenue: float
    segment_revenue: float
    net_income: float
    release: dt.date
    filing: dt.date
    preview: dt.date
    preview_revenue: float
    preview_segment: float
    gossip: dt.date
    gossip_revenue: float

    @property
    def label(self) -> str:
        """``Q1 2025``."""
        return f"Q{self.q} {self.year}"


@dataclass
class Company:
    """A fictional listed company with five years of quarters."""

    name: str
    slug: str
    ticker: str
    segment: str
    ceo: str
    quarters: list[Quarter] = field(default_factory=list)
    annual_report: dict[int, dt.date] = field(default_factory=dict)
    fy_preview: dict[int, tuple[dt.date, float]] = field(default_factory=dict)
    fy_gossip: dict[int, tuple[dt.date, float]] = field(default_factory=dict)

    def quarter(self, year: int, q: int) -> Quarter:
        """The quarter ``q`` of ``year``."""
        return self.quarters[(year - YEARS[0]) * 4 + q - 1]

    def full_year(self, year: int) -> float:
        """Full-year revenue (the sum of the four rounded quarters, as the Q4 release prints it)."""
        return round(sum(self.quarter(year, q).revenue for q in range(1, 5)), 1)

    def latest_released(self, day: dt.date) -> Quarter | None:
        """The last quarter whose official release is dated on or before ``day``."""
        out = None
        for qt in self.quarters:
            if qt.release <= day:
                out = qt
        return out


#: Draws ``_distinct`` makes before giving up on the band (a figure only its very edge moves).
_MAX_DRAWS = 10_000


def _distinct(rng: random.Random, actual: float, lo: float, hi: float) -> float:
    """A prediction off by lo..hi (relative), never printing the same as ``actual``.

    When no draw can print differently (a figure so small that ±hi rounds back to it, e.g. 0.2 with
    hi 0.15; the loop never ended) or ``_MAX_DRAWS`` draws did not (only the band's edge can), the
    prediction is one printed step away instead. Wherever the loop ended before, the draws are
    exactly as before, so worlds that built still build byte for byte the same."""
    far = [round(actual * (1 + s * hi), 1) for s in (-1, 1)]
    if not all(money(v) == money(actual) or v <= 0 for v in far):
        for _ in range(_MAX_DRAWS):
            v = round(actual * (1 + rng.choice((-1, 1)) * rng.uniform(lo, hi)), 1)
            if money(v) != money(actual) and v > 0:
                return v
    return round(actual + (0.1 if actual < 1000 else 100.0), 1)


def _quarter_end(year: int, q: int) -> dt.date:
    return {
        1: dt.date(year, 3, 31),
        2: dt.date(year, 6, 30),
        3: dt.date(year, 9, 30),
        4: dt.date(year, 12, 31),
    }[q]


def make_world(
    seed: int, companies: int, names: str = "sandbox", exclude: Collection[str] = ()
) -> list[Company]:
    """``companies`` fictional companies with figures for every quarter of ``YEARS``.

    ``names``: ``sandbox`` (the stems every sandbox build uses) or ``syllables`` (random stems, never
    one of ``sandbox_stems``, at least 5 letters so a ticker and a slug are as in the sandbox).
    ``exclude``: stems never drawn (the companies of other worlds: the research base's pretraining
    worlds exclude every example's); with none excluded, a world is as it always was."""
    if names not in NAME_SCHEMES:
        raise ValueError(f"names: expected one of {', '.join(NAME_SCHEMES)}, not {names!r}")
    rng = random.Random(seed)
    forbidden = (sandbox_stems() if names == "syllables" else frozenset()) | frozenset(exclude)
    taken: set[str] = set()
    out = []
    first = [
        "Ada",
        "Bo",
        "Cyra",
        "Dev",
        "Eli",
        "Fay",
        "Gus",
        "Hana",
        "Ivo",
        "Jae",
        "Kim",
        "Lev",
        "Mae",
        "Nia",
        "Oren",
        "Pia",
        "Raf",
        "Sana",
        "Teo",
        "Uma",
    ]
    last = [
        "Arden",
        "Brisk",
        "Calder",
        "Dunmore",
        "Ellery",
        "Frost",
        "Garrow",
        "Hale",
        "Ingram",
        "Jessop",
        "Kell",
        "Lowry",
        "Marr",
        "Nye",
        "Orwin",
        "Pryce",
    ]
    while len(out) < companies:
        stem = _sandbox_stem(rng) if names == "sandbox" else _syllable_stem(rng)
        name = f"{stem} {rng.choice(_FORMS)}"
        if stem in taken or stem in forbidden or len(stem) < 5:
            continue
        taken.add(stem)
        slug = stem.lower()
        ticker = (stem[:3] + stem[-1]).upper()
        comp = Company(
            name=name,
            slug=slug,
            ticker=ticker,
            segment=rng.choice(_SEGMENTS),
            ceo=f"{rng.choice(first)} {rng.choice(last)}",
        )
        revenue = rng.uniform(2.0, 40.0)
        share = rng.uniform(0.15, 0.45)
        margin = rng.uniform(0.05, 0.25)
        growth = rng.uniform(-0.01, 0.05)
        for year in YEARS:
            for q in range(1, 5):
                revenue *= 1 + growth + rng.uniform(-0.03, 0.03)
                share = min(0.6, max(0.1, share + rng.uniform(-0.01, 0.015)))
                rev = round(revenue, 1)
                seg = round(revenue * share, 1)
                net = round(revenue * max(0.01, margin + rng.uniform(-0.03, 0.03)), 1)
                release = _quarter_end(year, q) + dt.timedelta(days=rng.randint(22, 45 if q == 4 else 35))
                comp.quarters.append(
                    Quarter(
                        year=year,
                        q=q,
                        revenue=rev,
                        segment_revenue=seg,
                        net_income=net,
                        release=release,
                        filing=release + dt.timedelta(days=rng.randint(3, 12)),
                        preview=release - dt.timedelta(days=rng.randint(4, 15)),
                        preview_revenue=_distinct(rng, rev, 0.03, 0.12),
                        preview_segment=_distinct(rng, seg, 0.04, 0.15),
                        gossip=release + dt.timedelta(days=rng.randint(-20, 10)),
                        gossip_revenue=round(rev * rng.uniform(150, 400), 1),
                    )
                )
            q4 = comp.quarter(year, 4)
            comp.annual_report[year] = q4.release + dt.timedelta(days=rng.randint(15, 40))
            comp.fy_preview[year] = (
                dt.date(year, 11, 1) + dt.timedelta(days=rng.randint(0, 50)),
                _distinct(rng, comp.full_year(year), 0.03, 0.1),
            )
            comp.fy_gossip[year] = (
                dt.date(year, 3, 1) + dt.timedelta(days=rng.randint(0, 200)),
                round(comp.full_year(year) * rng.uniform(100, 300), 1),
            )
        out.append(comp)
    return out
