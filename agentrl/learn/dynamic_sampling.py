"""DAPO's dynamic sampling: keep only the groups whose rewards differ, refill the step with more tasks.

A group (the samples of one task in one step) whose trainable rewards are all equal has zero
group-normalised advantage: it carries no GRPO signal, yet under ``token-mean`` its tokens dilute
the loss of the others. ``fill_groups`` drops such groups and asks for more tasks, round after
round, until the step has its number of groups or ``max_rounds`` rounds have run (then it trains on
what it kept). The reward compared is the one the policy trains on (``training_reward``); judge
errors are left out of a group, as ``build_batch`` leaves them out of the update, so a group with
fewer than two scored samples carries no signal either. Turn rewards and the overlong penalty are
not part of the comparison (verl's default ``acc`` metric is the outcome too).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

from agentrl.trajectory import Trajectory, training_reward

T = TypeVar("T")

__all__ = ["fill_groups", "groups_with_signal", "refill_order"]


def refill_order(
    tasks: Sequence[T], drawn: Iterable[Hashable], key: Callable[[T], Hashable], seed: int
) -> list[T]:
    """The tasks a step may refill with: those not ``drawn`` already (by ``key``), in an order
    shuffled by ``seed``."""
    skip = set(drawn)
    rest = [t for t in tasks if key(t) not in skip]
    random.Random(seed).shuffle(rest)
    return rest


def groups_with_signal(rewards: Iterable[float | None], group_ids: Sequence[Hashable]) -> set[Hashable]:
    """The group ids whose rewards (``None`` = a judge error, left out) hold at least two different
    values."""
    seen: dict[Hashable, set[float]] = {}
    for r, g in zip(rewards, group_ids, strict=True):
        values = seen.setdefault(g, set())
        if r is not None:
            values.add(float(r))
    return {g for g, values in seen.items() if len(values) > 1}


def _groups(trajs: list[Trajectory]) -> dict[str, list[Trajectory]]:
    out: dict[str, list[Trajectory]] = {}
    for t in trajs:
        out.setdefault(t.task_id, []).append(t)
    return out


def fill_groups(
    first: list[Trajectory],
    more: Callable[[int], list[Trajectory]],
    *,
    target: int,
    max_rounds: int,
    normalize: bool,
) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
    """Keep the groups of ``first`` (one group per ``task_id``, in order) whose rewards differ, then
    call ``more(n)`` (n tasks more, sampled and judged; fewer or none when the tasks run out) until
    ``target`` groups are kept or ``max_rounds`` rounds (``first`` is round 1) have run. A refill
    round asks for the missing groups divided by the share of groups kept so far (at most 4× the
    missing number). Groups kept beyond ``target`` are dropped (the last sampled first).

    Returns (the kept trajectories in order, every trajectory sampled, metrics): ``train/dropped_groups``
    (groups without signal), ``train/sampling_rounds`` and ``train/prompts_sampled`` (tasks sampled).
    """
    sampled = list(first)
    kept: list[list[Trajectory]] = []
    n_groups, dropped, rounds = 0, 0, 0
    batch = first
    while True:
        rounds += 1
        groups = _groups(batch)
        n_groups += len(groups)
        signal = groups_with_signal(
            [training_reward(t, normalize) for t in batch], [t.task_id for t in batch]
        )
        kept += [g for task, g in groups.items() if task in signal]
        dropped += len(groups) - len(signal)
        missing = target - len(kept)
        if missing <= 0 or rounds >= max_rounds:
            break
        share = len(kept) / max(n_groups, 1)
        batch = more(min(4 * missing, math.ceil(missing / share)) if share > 0 else 4 * missing)
        if not batch:
            break
        sampled += batch
    metrics = {
        "train/dropped_groups": float(dropped),
        "train/sampling_rounds": float(rounds),
        "train/prompts_sampled": float(n_groups),
    }
    return [t for g in kept[:target] for t in g], sampled, metrics
