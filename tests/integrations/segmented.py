"""Episodes whose context was rewritten, for the adapter tests.

The scripted oracle runs the long-horizon suite's multi-source tasks through the episode loop with
``drop_observations`` at a small ``max_len`` (as tests/rollout/test_context.py does), so every
episode is split into context segments. The oracle reads the conversation, which an engine's
token-in-token-out ``generate`` does not see, so ``ReplayEngine`` answers each prompt with the ids
the oracle sampled for exactly that prompt: an adapter run with the same settings and seeds is fed
the same prompts and samples the same ids (a prompt it was not recorded for fails loudly).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.env import ResearchEnv
from agentrl.integrations.episode import (
    Episode,
    Generation,
    engine_limits,
    engine_spec,
    expand_episode,
    to_episode,
)
from agentrl.integrations.settings import expander_for, load_settings
from agentrl.policy import OraclePolicy
from agentrl.rollout.episode import Request, run_episode
from agentrl.tokens import Expander, expand_segments
from agentrl.trajectory import RewardBreakdown, Trajectory, training_reward
from tests.integrations.helpers import tokenizer

SUITE = str(Path(__file__).resolve().parents[2] / "examples" / "long-horizon-env")
MAX_LEN = 2048
NEW = 256  # the longest oracle turn (a three-company report) fits
COMPLETION = 100_000  # the engine's response budget: never the limit here
SETTINGS = {
    "env": {"suite": SUITE},
    "max_new_tokens": NEW,
    "max_len": MAX_LEN,
    "context": {"strategy": "drop_observations"},
}


def _logprobs(n: int, turn: int) -> list[float]:
    return [-0.01 * (i + 1) - 0.1 * turn for i in range(n)]


@functools.cache
def task_ids(n: int = 2) -> tuple[str, ...]:
    """The first ``n`` multi-source tasks of the suite (the oracle solves them step by step)."""
    env = ResearchEnv(SETTINGS["env"])
    return tuple(t.id for t in env.tasks if t.ground_truth.get("steps"))[:n]


@functools.cache
def _recorded(seed: int = 0) -> tuple[dict[tuple[int, ...], tuple[int, ...]], tuple[Episode, ...]]:
    """The oracle's sampled ids per prompt, and its episodes (one per task, reset with ``seed``),
    run in the loop with the adapters' limits, expander and context policy."""
    cfg = load_settings(SETTINGS)
    exp = expander_for(tokenizer())
    stop = int(tokenizer().convert_tokens_to_ids("<|im_end|>"))
    oracle = OraclePolicy()
    table: dict[tuple[int, ...], tuple[int, ...]] = {}

    async def gen(req: Request) -> Generation:
        msg = await oracle.act(req.messages, req.context())
        ids = [*tokenizer().encode(msg.text, add_special_tokens=False), stop][: req.max_tokens]
        table[tuple(req.prompt_ids or ())] = tuple(ids)
        return Generation(ids, _logprobs(len(ids), req.turn))

    limits = engine_limits(NEW, COMPLETION, max_len=MAX_LEN, context=cfg.context_policy())

    async def run() -> list[Episode]:
        out = []
        for t in task_ids():
            spec = engine_spec(t, seed, f"{t}#oracle")
            res = await run_episode(cfg.make_env(), spec, gen, expander=exp, limits=limits)
            out.append(await to_episode(res, exp, None))
        return out

    episodes = asyncio.run(run())
    return table, tuple(episodes)


def segmented_episodes(seed: int = 0) -> tuple[Episode, ...]:
    """The oracle's episodes of ``task_ids()`` (each split into context segments), as ``to_episode``
    gives them to the adapters."""
    return _recorded(seed)[1]


@dataclass
class ReplayEngine:
    """``await engine.generate(prompt_ids, max_tokens)``: the oracle's recorded ids for the prompt."""

    seed: int = 0
    prompts: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.table = _recorded(self.seed)[0]  # recorded here, outside the adapter's event loop

    async def generate(self, prompt_ids: list[int], max_tokens: int) -> Generation:
        self.prompts.append(list(prompt_ids))
        table = self.table
        key = tuple(prompt_ids)
        if key not in table:
            raise AssertionError(f"the engine was fed a prompt the oracle was not ({len(key)} ids)")
        ids = list(table[key])[:max_tokens]
        turn = tokenizer().decode(prompt_ids).count("<|im_start|>assistant") - 1
        return Generation(ids, _logprobs(len(ids), turn))


def expected_samples(
    trajectory: Trajectory, normalize: bool = True
) -> list[tuple[list[int], list[int], list[float]]]:
    """What an adapter must hand over for each context segment of ``trajectory`` that sampled a turn:
    a fresh expander's row (``expand_segments``, the reward contract's number) cut after its last
    policy token, as (ids ``[L]``, loss mask ``[L]``, per-token scores ``[L]``)."""
    reward = training_reward(trajectory, normalize)
    out = []
    for row in expand_segments(Expander(tokenizer()), trajectory, reward=reward):
        if not row.loss_mask.any():
            continue
        last = int(max(i for i, m in enumerate(row.loss_mask) if m)) + 1
        out.append(
            (
                row.input_ids[:last].tolist(),
                row.loss_mask[:last].tolist(),
                [float(x) for x in row.token_level_scores[:last]],
            )
        )
    return out


def graded_segmented(groups: dict[int, list[float | None]]) -> list[Episode]:
    """Episodes built from the oracle's segmented trajectory of each task index, one per listed
    total (``None``: ``judge_error``), each with its own id ``<task>#<k>``, expanded as the adapters
    do (rubric totals, ``normalize=False``, as ``helpers.graded_episodes``)."""
    exp = Expander(tokenizer())
    base = segmented_episodes()
    out = []
    for i, totals in groups.items():
        traj = base[i].trajectory
        for k, total in enumerate(totals):
            reward = (
                RewardBreakdown(total=None, status="judge_error", error="judge timed out")
                if total is None
                else RewardBreakdown(total=total)
            )
            copy = traj.model_copy(update={"id": f"{traj.task_id}#{k}", "reward": reward}, deep=True)
            out.append(expand_episode(copy, exp, normalize=False))
    return out


__all__ = [
    "MAX_LEN",
    "NEW",
    "SETTINGS",
    "ReplayEngine",
    "expected_samples",
    "graded_segmented",
    "segmented_episodes",
    "task_ids",
]
