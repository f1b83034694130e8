"""A run's judge summary: mean reward, per-criterion pass rates, judge errors, calls, tokens, cost."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from agentrl.trajectory import RewardBreakdown

__all__ = ["JudgeSummary", "summarize"]


class JudgeSummary(BaseModel):
    """Totals over many rewards. ``pass_rate[id]`` is the fraction of graded trajectories whose verdict
    on criterion ``id`` was ``Fully Satisfied`` (for a negative criterion: the flaw was present)."""

    trajectories: int = 0
    scored: int = 0
    judge_errors: int = 0
    mean_reward: float | None = None
    pass_rate: dict[str, float] = Field(default_factory=dict)
    negative: list[str] = Field(default_factory=list)
    """Ids of negative criteria (a flaw: their pass rate is how often the flaw was present)."""
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    first_error: str | None = None


def summarize(rewards: Iterable[RewardBreakdown | None]) -> JudgeSummary:
    """Summarise the rewards of a run (``None`` entries count as trajectories, not as scored)."""
    s = JudgeSummary()
    totals: list[float] = []
    full: dict[str, int] = {}
    seen: dict[str, int] = {}
    for r in rewards:
        s.trajectories += 1
        if r is None:
            continue
        s.calls += r.calls
        s.cache_hits += r.cache_hits
        s.prompt_tokens += r.prompt_tokens
        s.completion_tokens += r.completion_tokens
        s.cost_usd += r.cost_usd
        if r.status == "judge_error" or r.total is None:
            s.judge_errors += 1
            s.first_error = s.first_error or r.error
        else:
            s.scored += 1
            totals.append(r.total)
        for c in r.criteria:
            seen[c.id] = seen.get(c.id, 0) + 1
            full[c.id] = full.get(c.id, 0) + (c.verdict == "Fully Satisfied")
            if c.kind == "negative" and c.id not in s.negative:
                s.negative.append(c.id)
    s.mean_reward = sum(totals) / len(totals) if totals else None
    s.pass_rate = {k: full[k] / seen[k] for k in seen}
    return s
