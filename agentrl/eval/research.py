"""Does the policy research or recall? Three shares read from stored trajectories alone, the figures
that tell an agent that researches the question it is asked from one that recalls its training world:

- ``query_names_subject``: of the ``search`` calls, the share whose query names a subject of the
  question (a capitalised name of the prompt: the company, its product; not the sentence's first
  word, a period label such as ``Q2`` or ``FY2024``, or a year). A policy that recalls searches for
  its training companies whatever it is asked.
- ``url_from_context``: of the ``open_url`` calls, the share whose URL had appeared in an earlier
  tool result of the episode (the same page once normalised). A recalled URL comes from nowhere.
- ``answer_figures_opened``: of the answers that state a figure (``$12.3 billion``, ``4.5%``), the
  share whose every figure is printed on a page the episode opened (a successful ``open_url``).

Each is a pooled share over the episodes given (calls or answers, not episodes, are the unit), with
its count, or ``None`` when there was nothing to count. ``research_shares`` is what ``agentrl eval``
scorecards show (``Scorecard.research``, so ``summary.json``'s ``eval_before``/``eval_after`` too)
and what the run report shows for its evaluations and first and last RL steps
(``agentrl.explain.report.research``; ``docs/eval.md``, ``docs/report.md``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, computed_field

from agentrl.env.backends.sandbox import normalize_url
from agentrl.trajectory import Trajectory, report_of
from agentrl.trajectory.tools import tool_arg

__all__ = [
    "GENERIC_NAME_WORDS",
    "SHARE_LABELS",
    "ResearchShares",
    "Share",
    "answer_figures",
    "research_shares",
    "subject_names",
]

_URL = re.compile(r"https?://[^\s<>\"'`\]\)}]+")
_WORD = re.compile(r"[^\W\d_][\w&.-]*", re.UNICODE)
_PERIOD = re.compile(r"^(?:Q[1-4]|H[12]|FY\d*|CY\d*)$", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.?!:]\s*$")
_SCALE = r"(?:thousand|million|billion|trillion|bn|mn|[kmb])\b"
_FIGURE = re.compile(
    rf"\$\s?\d[\d,]*(?:\.\d+)?(?:\s*{_SCALE})?|\b\d[\d,]*(?:\.\d+)?\s?%",
    re.IGNORECASE,
)
_ERROR_PREFIX = "Error:"
#: Words of a company's name that name no company in particular (legal forms, generic trades).
GENERIC_NAME_WORDS = frozenset(
    [
        "inc",
        "corp",
        "corporation",
        "co",
        "company",
        "ltd",
        "llc",
        "plc",
        "sa",
        "ag",
        "nv",
        "group",
        "holdings",
        "systems",
        "technologies",
        "technology",
        "industries",
        "labs",
        "networks",
        "ai",
        "the",
    ]
)


class Share(BaseModel):
    """``hits`` of ``total`` counted; ``share`` is their ratio, None when ``total`` is 0 (it is in
    ``model_dump`` too, so a JSON reader needs no division)."""

    hits: int
    total: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def share(self) -> float | None:
        return self.hits / self.total if self.total else None

    def text(self) -> str:
        """``"15/16 (94%)"``; ``"-"`` when nothing was counted."""
        return f"{self.hits}/{self.total} ({self.hits / self.total:.0%})" if self.total else "-"


#: What each share counts, in words, for tables (the scorecard's, the run report's): its name → label.
SHARE_LABELS = {
    "query_names_subject": "searches naming the subject",
    "url_from_context": "opened URLs from a tool result",
    "answer_figures_opened": "answer figures on an opened page",
}


class ResearchShares(BaseModel):
    """The three shares of the module docstring."""

    query_names_subject: Share
    url_from_context: Share
    answer_figures_opened: Share

    def shares(self) -> dict[str, Share]:
        """Each share by name, in ``SHARE_LABELS`` order."""
        return {name: getattr(self, name) for name in SHARE_LABELS}

    def figures(self) -> dict[str, float | None]:
        """Share per name (None where nothing was counted), for tables and JSON."""
        return {name: s.share for name, s in self.shares().items()}


def subject_names(prompt: str) -> set[str]:
    """The capitalised names of a question, lowercased: every word that starts with a capital letter
    and is not the first word of a sentence, a period label, a year or a generic word of company
    names (``GENERIC_NAME_WORDS``). ``"What was Ostionline Networks' revenue in Q2 2021?"`` →
    ``{"ostionline"}``."""
    names: set[str] = set()
    prev = None  # the previous word's start: what lies from there decides a sentence start
    for m in _WORD.finditer(prompt):
        word = m.group().rstrip(".-")
        # the text since the previous word's start, not the whole prefix: linear in the prompt
        starts = prev is None or bool(_SENTENCE_END.search(prompt[prev : m.start()]))
        prev = m.start()
        if starts or not word[:1].isupper() or _PERIOD.match(word) or len(word) < 2:
            continue
        name = word.removesuffix("'s").removesuffix("'").lower()
        if name not in GENERIC_NAME_WORDS:
            names.add(name)
    return names


def _norm_figure(text: str) -> str:
    t = re.sub(r"[\s,]", "", text.lower())
    return {"bn": "billion", "mn": "million"}.get(t, t)


def answer_figures(text: str) -> set[str]:
    """The figures a text states (money amounts and percentages), normalised: no spaces or thousands
    separators, lowercase (``"$ 12.3 Billion"`` → ``"$12.3billion"``)."""
    return {_norm_figure(m.group()) for m in _FIGURE.finditer(text)}


def _calls(traj: Trajectory) -> dict[str, tuple[str, Any]]:
    """tool_call_id → (tool name, parsed arguments or None) of every assistant tool call."""
    out: dict[str, tuple[str, Any]] = {}
    for msg in traj.messages:
        for call in msg.tool_calls or []:
            try:
                args = call.function.parsed_arguments()
            except ValueError:
                args = None
            out[call.id] = (call.function.name, args)
    return out


def _episode(traj: Trajectory) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(hits, total) of each share for one trajectory."""
    calls = _calls(traj)
    names = subject_names(traj.prompt())
    q_hits = q_total = u_hits = u_total = 0
    seen_urls: set[str] = set()
    opened_text: list[str] = []
    for msg in traj.messages:
        if msg.role != "tool":
            continue
        name, args = calls.get(str(msg.tool_call_id), (msg.name or "", None))
        text = msg.text
        args = args if isinstance(args, dict) else {}
        if (query := tool_arg(name, "search", args)) is not None:
            q_total += 1
            words = {w.group().rstrip(".-").removesuffix("'s").lower() for w in _WORD.finditer(query)}
            q_hits += bool(names & words)
        elif (url := tool_arg(name, "page", args)) is not None:
            u_total += 1
            u_hits += normalize_url(url) in seen_urls
            if not text.startswith(_ERROR_PREFIX):
                opened_text.append(text)
        seen_urls.update(normalize_url(u.rstrip(".,;")) for u in _URL.findall(text))
    report = report_of(traj)
    figs = answer_figures(report or "")
    a_total = int(bool(figs))
    on_pages = set().union(*(answer_figures(t) for t in opened_text)) if opened_text else set()
    a_hits = int(bool(figs) and figs <= on_pages)
    return (q_hits, q_total), (u_hits, u_total), (a_hits, a_total)


def research_shares(trajectories: Iterable[Trajectory]) -> ResearchShares:
    """The pooled shares over ``trajectories`` (module docstring)."""
    sums = [[0, 0], [0, 0], [0, 0]]
    for t in trajectories:
        for acc, (h, n) in zip(sums, _episode(t), strict=True):
            acc[0] += h
            acc[1] += n
    q, u, a = (Share(hits=h, total=n) for h, n in sums)
    return ResearchShares(query_names_subject=q, url_from_context=u, answer_figures_opened=a)
