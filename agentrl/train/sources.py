"""Which pages the policy opens: per step, the ``open_url`` calls that opened a page and how many of
those pages the company itself published (``OFFICIAL_KINDS`` of the sandbox corpus), and, in
``summary.json``, the official share over the first and the last window of steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl.env.backends.sandbox import corpus_kinds, normalize_url
from agentrl.env.sandbox.pages import OFFICIAL_KINDS
from agentrl.trajectory import Trajectory

__all__ = ["OPENED", "OPENED_OFFICIAL", "opened_sources", "page_kinds", "summarize_sources"]

OPENED = "env/opened_pages"
OPENED_OFFICIAL = "env/opened_official"


def page_kinds(suite: Any) -> dict[str, str]:
    """Normalised URL → page kind of the suite's corpus; ``{}`` when it has no corpus or no page of
    an official kind (then nothing is counted)."""
    if getattr(suite, "corpus_path", None) is None:
        return {}
    kinds = corpus_kinds(suite.corpus_path)
    return kinds if OFFICIAL_KINDS & set(kinds.values()) else {}


def opened_sources(trajs: Sequence[Trajectory], kinds: dict[str, str]) -> dict[str, float]:
    """``env/opened_pages``: the ``open_url`` calls that returned a page (from each trajectory's
    ``info.tool_log``); ``env/opened_official``: those whose page is of an official kind. ``{}``
    without ``kinds``."""
    if not kinds:
        return {}
    opened = official = 0
    for t in trajs:
        for entry in t.info.get("tool_log") or []:
            if not isinstance(entry, dict) or entry.get("tool") != "open_url" or entry.get("ok") is not True:
                continue
            url = (entry.get("args") or {}).get("url")
            opened += 1
            official += isinstance(url, str) and kinds.get(normalize_url(url)) in OFFICIAL_KINDS
    return {OPENED: float(opened), OPENED_OFFICIAL: float(official)}


def summarize_sources(rows: Sequence[dict[str, Any]], frac: float = 0.2) -> dict[str, float]:
    """``official_source_first`` / ``_last``: opened official pages ÷ opened pages, pooled over the
    first and the last ``frac`` of the steps (the windows of ``summarize_rewards``); a window that
    opened no page is left out. ``{}`` when the steps counted nothing."""
    counted = [r for r in rows if OPENED in r]
    if not counted:
        return {}
    k = max(1, round(len(rows) * frac))
    out: dict[str, float] = {}
    for name, window in (("official_source_first", rows[:k]), ("official_source_last", rows[-k:])):
        opened = sum(r.get(OPENED, 0.0) for r in window)
        if opened > 0:
            out[name] = sum(r.get(OPENED_OFFICIAL, 0.0) for r in window) / opened
    return out
