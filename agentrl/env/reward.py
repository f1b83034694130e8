"""The one place where the env asks the judge for a reward.

Deterministic rubrics are scored at once (synchronously, no I/O). A rubric with LLM criteria is
either scored inline (a blocking call to the LLM judge) or left to the rollout's batched judge;
``score_report`` then returns None and the caller marks the episode ``needs_judge``. With
``turn_credit: evidence``, ``turn_credit`` splits the reward's figure criteria over the turns that
read them (recomputed by ``record_reward`` whenever a judge records a reward later).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from agentrl.stopping import in_background, wait
from agentrl.trajectory import RewardBreakdown, Trajectory

__all__ = ["is_deterministic", "rubric_for", "score_report", "score_trajectory_llm", "turn_credit"]


def _judge():
    # The judge package exports these names; the submodule path works while its __init__ is absent.
    try:
        from agentrl.judge import parse_rubric, score_deterministic
    except ImportError:
        from agentrl.judge.graders import score_deterministic
        from agentrl.judge.rubric import parse_rubric
    return parse_rubric, score_deterministic


@lru_cache(maxsize=4096)
def _parse_cached(key: str, text: str, source: str):
    import json

    parse_rubric, _ = _judge()
    data: Any = json.loads(text) if key == "json" else text
    return parse_rubric(data, source=source)


def rubric_for(data: dict[str, Any] | str, source: str = "<inline>"):
    """A validated ``Rubric`` from an inline mapping or YAML text (parsed once per content)."""
    import json

    if isinstance(data, dict):
        return _parse_cached("json", json.dumps(data, sort_keys=True), source)
    return _parse_cached("yaml", data, source)


def is_deterministic(rubric) -> bool:
    """True when the rubric needs no LLM judge."""
    return bool(rubric.is_deterministic)


def score_report(
    rubric, report: str, *, prompt: str = "", trajectory: Trajectory | None = None
) -> RewardBreakdown | None:
    """The reward of a final report under a deterministic rubric; None when it needs the LLM judge.

    ``trajectory`` is the episode so far: evidence graders read what the agent did from it, as
    ``agentrl judge`` and replay do from the stored trajectory (``agentrl.judge.evidence``)."""
    if not rubric.is_deterministic:
        return None
    _, score_deterministic = _judge()
    evidence = None
    if trajectory is not None and rubric.uses_evidence:
        from agentrl.judge.evidence import evidence_of

        evidence = evidence_of(trajectory)
    return score_deterministic(rubric, report, prompt=prompt, evidence=evidence)


def turn_credit(trajectory: Trajectory, rubric) -> list[float]:
    """The share of the trajectory's reward each assistant turn earned by reading a rewarded figure
    (``agentrl.judge.credit``; all 0 while the reward is missing): the env's ``turn_credit: evidence``."""
    from agentrl.judge.credit import evidence_turn_credit

    return evidence_turn_credit(trajectory, rubric, trajectory.reward)


def score_trajectory_llm(
    trajectory: Trajectory, rubric, *, model: str, api_base: str | None = None
) -> RewardBreakdown:
    """Score with the LLM judge, blocking (for ``judge: inline`` outside an event loop)."""
    import asyncio

    from agentrl.judge import make_judge

    cfg: dict[str, Any] = {"model": model}
    if api_base:
        cfg["api_base"] = api_base

    def run() -> RewardBreakdown:
        # A judge per call: the env has no end-of-run hook, and a judge's call pool lives on one loop.
        with make_judge(cfg, source="env judge") as judge:
            return asyncio.run(judge.score(trajectory, rubric))

    # On a thread of its own (asyncio.run needs one when step() is called inside an event loop), waited
    # on with stop points: a stop does not wait for a judge's server that answers late.
    return wait(in_background(run, name="agentrl-judge"))
