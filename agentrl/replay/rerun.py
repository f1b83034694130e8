"""Re-run stored episodes through the env, answering tools from a recorded cache.

With ``cache: {mode: replay}`` the env builds no backend at all, so a re-run makes no network
request: a call that was never recorded becomes an error observation. The policy is either the
stored one (each trajectory's own assistant turns, played back in order: ``playback`` is a generate
function of the episode loop, ``agentrl.rollout.episode``) or the scripted oracle.
Each re-run is compared with the stored episode: same observations, same reward, or where it left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel

from agentrl.errors import ConfigError
from agentrl.rollout.episode import EpisodeSpec, GenerateFn, Request, Stop, policy_generate, run_episode
from agentrl.trajectory import Message, Trajectory

__all__ = ["RerunResult", "format_rerun", "playback", "rerun"]

_MISS = "is not in the replay cache"  # the error of a tool call that was never recorded


class RerunResult(BaseModel):
    """One re-run compared with its stored episode."""

    id: str
    turns_stored: int
    turns_rerun: int
    same_observations: bool
    same_reward: bool
    first_difference: str | None = None
    reward_stored: float | None = None
    reward_rerun: float | None = None
    cache_misses: int = 0


def _playback(m: Message) -> Message:
    """A stored assistant turn as the policy first sent it: calls the env parsed out of the text are
    dropped again (the env re-parses the text and gives the calls the same ids)."""
    if getattr(m, "tool_call_format", None):
        return m.model_copy(update={"tool_calls": None, "tool_call_format": None})
    return m


def playback(turns: Sequence[Message], stop_reason: str) -> tuple[GenerateFn, list[int]]:
    """A generate function that plays ``turns`` back in order, then stops with ``stop_reason``;
    and a one-item list that counts the turns played."""
    played = [0]

    async def generate(req: Request) -> Message | Stop:
        if played[0] >= len(turns):
            return Stop(stop_reason)
        played[0] += 1
        return _playback(turns[played[0] - 1])

    return generate, played


def _tool_texts(t: Trajectory) -> list[str]:
    return [m.text for m in t.messages if m.role == "tool"]


def _compare(old: Trajectory, new: Trajectory) -> tuple[bool, str | None]:
    a, b = _tool_texts(old), _tool_texts(new)
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return False, f"observation {k + 1} differs: stored {x[:100]!r}, re-run {y[:100]!r}"
    if len(a) != len(b):
        return False, f"{len(a)} observations stored, {len(b)} in the re-run"
    return True, None


def _total(t: Trajectory) -> float | None:
    return t.reward.total if t.reward is not None else None


def rerun(
    trajs: Sequence[Trajectory],
    env_config: dict[str, Any],
    *,
    policy: Literal["stored", "oracle"] = "stored",
    noise: float = 0.0,
) -> tuple[list[Trajectory], list[RerunResult]]:
    """Re-run each trajectory's task with its stored seed (``info.seed``) on one ``ResearchEnv(env_config)``.

    ``policy="stored"`` plays the stored assistant turns back; ``"oracle"`` lets the scripted
    oracle (with ``noise``) act. Returns the new trajectories (same ids) and one ``RerunResult`` each.
    """
    from agentrl.env import ResearchEnv
    from agentrl.policy import OraclePolicy

    env = ResearchEnv(env_config)
    oracle = OraclePolicy(noise=noise) if policy == "oracle" else None
    new_trajs: list[Trajectory] = []
    results: list[RerunResult] = []

    async def one(old: Trajectory) -> None:
        seed = old.info.get("seed")
        seed = int(seed) if isinstance(seed, int) else None
        try:
            task = env.suite.task(old.task_id)
        except ConfigError:
            raise ConfigError(
                f"trajectory {old.id!r}: task {old.task_id!r} is not in suite {env.suite.root}"
            ) from None
        stored_turns = [m for m in old.messages if m.role == "assistant"]
        # Stored turns that run out before the episode ends: unanswered, for the stored reason.
        generate, played = playback(stored_turns, old.info.get("truncated_reason") or "stored_turns_ended")
        if oracle is not None:
            generate = policy_generate(oracle)
        info = {k: old.info[k] for k in ("sample", "seed", "step") if k in old.info}
        info["policy"] = "stored" if oracle is None else oracle.name
        res = await run_episode(env, EpisodeSpec(old.id, task, seed, info), generate)
        new, note = res.trajectory, None
        if oracle is None and res.stop_reason is not None:
            note = f"the stored turns ran out after turn {played[0]}; the episode was not over"
        elif oracle is None and played[0] < len(stored_turns):
            k = played[0]
            note = f"the re-run ended after turn {k}; {len(stored_turns) - k} stored turns left over"
        same_obs, diff = _compare(old, new)
        r_old, r_new = _total(old), _total(new)
        results.append(
            RerunResult(
                id=old.id,
                turns_stored=len(stored_turns),
                turns_rerun=sum(m.role == "assistant" for m in new.messages),
                same_observations=same_obs,
                same_reward=r_old == r_new,
                first_difference=diff or note,
                reward_stored=r_old,
                reward_rerun=r_new,
                cache_misses=sum(_MISS in str(e.get("error", "")) for e in new.info.get("tool_log", [])),
            )
        )
        new_trajs.append(new)

    async def all_in_order() -> None:
        for old in trajs:
            await one(old)

    asyncio.run(all_in_order())
    return new_trajs, results


def format_rerun(results: Sequence[RerunResult]) -> str:
    """One line per re-run episode, then a count of identical ones."""

    def num(x: float | None) -> str:
        return "–" if x is None else f"{x:.4f}"

    head = ["id", "turns", "observations", "reward stored → re-run", "cache misses"]
    rows = [
        [
            r.id,
            f"{r.turns_stored}→{r.turns_rerun}",
            "same" if r.same_observations else "DIFFERENT",
            f"{num(r.reward_stored)} → {num(r.reward_rerun)}",
            str(r.cache_misses),
        ]
        for r in results
    ]
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(x, widths, strict=True)).rstrip() for x in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if r.first_difference:
            lines.append(f"{r.id}: {r.first_difference}")
    same = sum(r.same_observations and r.same_reward for r in results)
    lines.append(f"{same}/{len(results)} re-runs identical to the stored episodes (observations and reward)")
    return "\n".join(lines)
