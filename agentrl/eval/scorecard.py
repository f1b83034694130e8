"""A scorecard: what a set of judged trajectories says about the policy that sampled them.

``scorecard(trajectories)`` counts and scores episodes grouped by task (``task_id``); its figures:

- ``reward``: the mean normalised reward (``agentrl.judge.normalized_reward``) over scored episodes,
  as the mean over tasks of each task's mean over its samples, with a 95% percentile bootstrap
  interval resampling tasks (``agentrl.eval.stats``). Judge errors are excluded and counted;
  episodes that gave no answer count 0 (the env's rule: their reward is 0). Unjudged episodes
  (no reward yet) are excluded and counted.
- ``mean_at_n``/``best_at_n``/``worst_at_n``/``std_at_n``: verl's mean@N, best@N, worst@N, std@N
  (the mean over tasks of each task's mean, max, min and population std over its samples).
- ``pass_at_k``: per task, the unbiased pass@k of its n scored samples of which c *pass*
  (normalised reward ≥ ``pass_threshold``, by default a full-score report), averaged over the
  tasks with at least k samples; k = 1, 2, 4, … up to the most samples a task has.
- shares of episodes: with a tool call the env ran (``info.tool_calls`` ≥ 1), unanswered (no
  report), cut at the token limit (``truncated_reason`` ``generation_limit`` or ``max_len``, or a
  turn that ended with ``finish_reason: length``); the official share of the pages opened
  (``agentrl.env.sources``, when the suite's corpus is known).
- ``criteria``: per criterion id, the share of scored episodes that meet it: a positive
  criterion's mean score, a negative criterion's mean of 1 − score (free of the flaw).
- ``research``: research or recall (``agentrl.eval.research``): of the searches, the share naming
  the question's subject; of the ``open_url`` calls, the share whose URL a tool result printed; of
  the answers stating figures, the share whose every figure is on a page the episode opened. Over
  every episode given, judged or not (they read the episode, not its reward).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from agentrl.env.sources import OPENED, OPENED_OFFICIAL, opened_sources, page_kinds
from agentrl.eval.research import SHARE_LABELS, ResearchShares, research_shares
from agentrl.eval.stats import N_BOOT, bootstrap_ci, cluster_ci, pass_at_k
from agentrl.judge import normalized_reward
from agentrl.trajectory import Trajectory

__all__ = [
    "FULL_SCORE",
    "TOKEN_LIMIT_REASONS",
    "CriterionRate",
    "Interval",
    "Scorecard",
    "kinds_for",
    "scorecard",
    "scorecard_table",
]

#: The default pass threshold of pass@k: a full-score report (normalised reward 1).
FULL_SCORE = 1.0
#: A sample passes at normalised reward ≥ threshold − ``_ROUNDING`` (a sum of weights may miss 1 by an ulp).
_ROUNDING = 1e-9
#: Why an episode ended that means the policy ran out of tokens (``agentrl.rollout.episode``).
TOKEN_LIMIT_REASONS = frozenset({"generation_limit", "max_len"})


class Interval(BaseModel):
    """A mean with its bootstrap interval over tasks (finite numbers, as every figure here)."""

    model_config = ConfigDict(allow_inf_nan=False)
    mean: float
    low: float
    high: float
    level: float = 0.95


class CriterionRate(BaseModel):
    """One criterion: how many scored episodes graded it and the share that met it."""

    model_config = ConfigDict(allow_inf_nan=False)
    id: str
    kind: str
    episodes: int
    pass_rate: float


class Scorecard(BaseModel):
    """The figures of ``scorecard`` (see the module docstring); JSON-ready with ``model_dump``. Every
    number is finite: the rewards it reads are (``RewardBreakdown``), and a NaN is never a figure."""

    model_config = ConfigDict(allow_inf_nan=False)
    policies: list[str]
    tasks: int
    episodes: int
    scored: int
    judge_errors: int
    unjudged: int
    samples_per_task: int
    """The most scored samples any task has (N of mean@N); ``min_samples_per_task`` the fewest."""
    min_samples_per_task: int
    reward: Interval | None
    """Mean normalised reward over tasks, with its interval; None when nothing was scored."""
    mean_total: float | None
    """Mean raw reward (the rubric's weighted sum) over scored episodes."""
    mean_at_n: float | None
    best_at_n: float | None
    worst_at_n: float | None
    std_at_n: float | None
    pass_threshold: float
    pass_at_k: dict[str, float]
    pass_at_1: Interval | None
    """pass@1 with its interval over tasks."""
    tool_call_episodes: float | None
    unanswered: float | None
    token_limit: float | None
    opened_pages: int | None
    official_share: float | None
    criteria: list[CriterionRate]
    research: ResearchShares
    """Research or recall: each share's hits, total and ratio (None where nothing was counted)."""
    n_boot: int
    seed: int


def _cut(t: Trajectory) -> bool:
    if t.info.get("truncated_reason") in TOKEN_LIMIT_REASONS:
        return True
    return any(m.role == "assistant" and m.finish_reason == "length" for m in t.messages)


def _share(flags: Iterable[bool], n: int) -> float | None:
    return sum(flags) / n if n else None


def kinds_for(trajectories: Sequence[Trajectory]) -> dict[str, str]:
    """The page kinds of the suites the trajectories name (``info.suite``) that can still be read
    here; ``{}`` when none can (then the official share is not counted)."""
    from agentrl.env.suite import load_suite

    kinds: dict[str, str] = {}
    for name in sorted({str(t.info["suite"]) for t in trajectories if t.info.get("suite")}):
        if name == "sandbox" or Path(name).is_dir():
            try:
                kinds |= page_kinds(load_suite(name))
            except Exception:  # a suite that moved or changed: the share is left out, not the scorecard
                continue
    return kinds


def scorecard(
    trajectories: Sequence[Trajectory],
    *,
    kinds: dict[str, str] | None = None,
    pass_threshold: float = FULL_SCORE,
    level: float = 0.95,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> Scorecard:
    """The scorecard of ``trajectories`` (see the module docstring). ``kinds``: the suite's page
    kinds for the official share (default: looked up from ``info.suite``)."""
    trajs = list(trajectories)
    kinds = kinds_for(trajs) if kinds is None else kinds
    by_task: dict[str, list[float]] = defaultdict(list)
    totals: list[float] = []
    crit: dict[str, list[float]] = defaultdict(list)
    crit_kind: dict[str, str] = {}
    judge_errors = unjudged = 0
    for t in trajs:
        r = t.reward
        if r is None:
            unjudged += 1
            continue
        if r.total is None:
            judge_errors += 1
            continue
        by_task[t.task_id].append(normalized_reward(t))
        totals.append(r.total)
        for c in r.criteria:
            crit_kind.setdefault(c.id, c.kind)
            crit[c.id].append(1.0 - c.score if c.kind == "negative" else c.score)
    by_task = dict(sorted(by_task.items()))  # task order, so the draws never depend on file order
    n = len(trajs)
    counts = [len(v) for v in by_task.values()]
    reward = pass1 = None
    pass_k: dict[str, float] = {}
    if by_task:
        flat = [(x, t) for t, v in by_task.items() for x in v]
        mean, low, high = cluster_ci(
            [x for x, _ in flat], [t for _, t in flat], level=level, n_boot=n_boot, seed=seed
        )
        reward = Interval(mean=mean, low=low, high=high, level=level)
        passes = {t: sum(x >= pass_threshold - _ROUNDING for x in v) for t, v in by_task.items()}
        for k in _ks(max(counts)):
            ok = [t for t, v in by_task.items() if len(v) >= k]
            pass_k[str(k)] = float(
                pass_at_k([len(by_task[t]) for t in ok], [passes[t] for t in ok], k).mean()
            )
        p1 = pass_at_k(counts, [passes[t] for t in by_task], 1)
        pass1 = Interval(mean=float(p1.mean()), level=level, **_ci(p1, level, n_boot, seed))
    opened = opened_sources(trajs, kinds)
    pages = int(opened.get(OPENED, 0)) if kinds else None
    return Scorecard(
        policies=sorted({str(t.info["policy"]) for t in trajs if t.info.get("policy")}),
        tasks=len({t.task_id for t in trajs}),
        episodes=n,
        scored=len(totals),
        judge_errors=judge_errors,
        unjudged=unjudged,
        samples_per_task=max(counts, default=0),
        min_samples_per_task=min(counts, default=0),
        reward=reward,
        mean_total=float(np.mean(totals)) if totals else None,
        mean_at_n=reward.mean if reward else None,
        best_at_n=float(np.mean([max(v) for v in by_task.values()])) if by_task else None,
        worst_at_n=float(np.mean([min(v) for v in by_task.values()])) if by_task else None,
        std_at_n=float(np.mean([np.std(v) for v in by_task.values()])) if by_task else None,
        pass_threshold=pass_threshold,
        pass_at_k=pass_k,
        pass_at_1=pass1,
        tool_call_episodes=_share((int(t.info.get("tool_calls", 0)) > 0 for t in trajs), n),
        unanswered=_share((t.info.get("status") == "unanswered" for t in trajs), n),
        token_limit=_share((_cut(t) for t in trajs), n),
        opened_pages=pages,
        official_share=opened[OPENED_OFFICIAL] / pages if pages else None,
        criteria=[
            CriterionRate(id=c, kind=crit_kind[c], episodes=len(v), pass_rate=float(np.mean(v)))
            for c, v in crit.items()
        ],
        research=research_shares(trajs),
        n_boot=n_boot,
        seed=seed,
    )


def _ks(n: int) -> list[int]:
    """The k of pass@k: 1, 2, 4, … below n, and n."""
    ks = [1 << i for i in range(n.bit_length()) if 1 << i < n]
    return [*ks, n]


def _ci(per_task: np.ndarray, level: float, n_boot: int, seed: int) -> dict[str, float]:
    low, high = bootstrap_ci(per_task, level=level, n_boot=n_boot, seed=seed)
    return {"low": low, "high": high}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _interval(i: Interval | None) -> str:
    return "-" if i is None else f"{i.mean:.3f}  [{i.low:.3f}, {i.high:.3f}]"


def scorecard_table(card: Scorecard, title: str = "scorecard") -> str:
    """The scorecard as aligned plain-text lines (what ``agentrl eval`` prints)."""
    level = f"{(card.reward or card.pass_at_1 or Interval(mean=0, low=0, high=0)).level:.0%}"
    threshold = (
        "a full-score report"
        if card.pass_threshold >= FULL_SCORE - _ROUNDING
        else f"normalised reward ≥ {card.pass_threshold:g}"
    )
    n = card.samples_per_task
    spread = f"{card.min_samples_per_task}-{n}" if card.min_samples_per_task != n else str(n)
    rows: list[tuple[str, str]] = [
        ("policy", ", ".join(card.policies) or "-"),
        ("tasks · episodes", f"{card.tasks} · {card.episodes} ({spread} scored samples per task)"),
        ("scored · judge errors · unjudged", f"{card.scored} · {card.judge_errors} · {card.unjudged}"),
        (f"mean normalised reward [{level} CI over tasks]", _interval(card.reward)),
        (f"pass@1 [{level} CI]", _interval(card.pass_at_1)),
    ]
    rows += [(f"pass@{k}", _num(v)) for k, v in card.pass_at_k.items() if k != "1"]
    rows += [
        (f"mean@{n} · best@{n} · worst@{n}", " · ".join(_num(v) for v in (card.mean_at_n, card.best_at_n, card.worst_at_n))),
        ("mean raw reward", _num(card.mean_total)),
        ("episodes with a tool call", _pct(card.tool_call_episodes)),
        ("unanswered", _pct(card.unanswered)),
        ("cut at the token limit", _pct(card.token_limit)),
        (
            "official share of opened pages",
            "-" if card.official_share is None else f"{card.official_share:.1%} of {card.opened_pages}",
        ),
    ]  # fmt: skip
    if card.criteria:
        rows.append(("criteria met (negative: free of the flaw)", ""))
        rows += [(f"  {c.id} ({c.kind})", f"{c.pass_rate:.1%} of {c.episodes}") for c in card.criteria]
    rows.append(("research or recall (per call or answer)", ""))
    rows += [(f"  {SHARE_LABELS[k]}", share.text()) for k, share in card.research.shares().items()]
    width = max(len(k) for k, _ in rows)
    lines = [title, *(f"  {k.ljust(width)}  {v}".rstrip() for k, v in rows)]
    lines.append(
        f"  (pass = {threshold}; intervals: percentile bootstrap over tasks, {card.n_boot} resamples, "
        f"seed {card.seed})"
    )
    return "\n".join(lines)
