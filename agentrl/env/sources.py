"""Which pages a policy opens: the ``open_url`` calls that opened a page and how many of those pages
the company itself published (``OFFICIAL_KINDS`` of the sandbox corpus).

The one count of opened sources: the trainer's per-step ``env/opened_pages`` /
``env/opened_official`` and ``agentrl rollout``'s ``opened_pages`` / ``opened_official`` both
come from ``opened_sources``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl.env.backends.sandbox import corpus_kinds, normalize_url
from agentrl.env.sandbox.pages import OFFICIAL_KINDS
from agentrl.trajectory import Trajectory
from agentrl.trajectory.tools import tool_arg, tools_with_role

__all__ = ["OPENED", "OPENED_OFFICIAL", "opened_sources", "page_kinds"]

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
            if (
                not isinstance(entry, dict)
                or entry.get("tool") not in tools_with_role("page")
                or entry.get("ok") is not True
            ):
                continue
            url = tool_arg(entry["tool"], "page", entry.get("args") or {})
            opened += 1
            official += isinstance(url, str) and kinds.get(normalize_url(url)) in OFFICIAL_KINDS
    return {OPENED: float(opened), OPENED_OFFICIAL: float(official)}
