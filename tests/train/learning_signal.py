"""The trainer tests' shared fixture: a tiny run whose rewards are non-zero and differ within a group.

A tiny random policy never answers (every turn is cut at the token limit, and a cut turn is never a
report), and it never solves the sandbox's tasks, so every reward would be 0; with all rewards 0 the
advantages, losses and gradients are 0 too, and a test of "the weights move", "resume continues
exactly" or "N ranks equal one" passes whatever the trainer does. ``TINY`` therefore uses a tiny
model trained to answer in a few random words (``tests.answering_model``) and scores every episode
with ``letters_rubric.yaml`` (deterministic graders that those answers pass some of the time), and ``assert_learning_signal`` checks, on a run's own
outputs, that the signal is there: every test that trains calls it, so none can degenerate again.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.rundir import read_token_stats
from agentrl.train import TrainConfig
from agentrl.trajectory import read_trajectories
from tests.answering_model import answering_model_dir

RUBRIC = Path(__file__).with_name("letters_rubric.yaml")

TINY: dict[str, Any] = {
    "model": {"path": str(answering_model_dir())},
    "rollout": {
        "tasks_per_step": 2,
        "group_size": 2,
        "max_turns": 2,
        "max_new_tokens": 12,
        "max_len": 2048,
        "env": {"search_k": 2, "page_chars": 300, "system_prompt": "Today is {date}. Tools: {tools}"},
    },
    "judge": {"rubric": str(RUBRIC)},
    "algorithm": {"mini_batch_size": 2, "micro_batch_tokens": 4096},
    "optim": {"lr": 1e-3, "critic_lr": 1e-3},
    "steps": 2,
    "sft_steps": 2,
}


def config_dict(**over: Any) -> dict[str, Any]:
    """A deep copy of ``TINY`` with dotted-key overrides (``{"algorithm.name": "ppo"}``)."""
    data = json.loads(json.dumps(TINY))
    for key, value in over.items():
        cur = data
        *parents, last = key.split(".")
        for p in parents:
            cur = cur.setdefault(p, {})
        cur[last] = value
    return data


def train_config(tmp_path: Path, **over: Any) -> TrainConfig:
    """``TINY`` (with ``over``) writing to ``tmp_path / "run"``."""
    return TrainConfig.model_validate(config_dict(output_dir=str(tmp_path / "run"), **over))


def assert_learning_signal(run_dir: Path | str, step: int = 1) -> None:
    """Fail unless step ``step`` of the run in ``run_dir`` had something to learn from: every
    trajectory scored, some reward non-zero, the rewards of at least one task's group not all
    equal, and non-zero advantages on the policy tokens (from ``tokens/step_NNNNN.npz``)."""
    run_dir = Path(run_dir)
    trajs = list(read_trajectories(run_dir / "trajectories" / f"step_{step:05d}.jsonl"))
    assert trajs and all(t.reward is not None and t.reward.status == "ok" for t in trajs)
    groups: dict[str, list[float]] = defaultdict(list)
    for t in trajs:
        groups[t.task_id].append(t.reward.total)
    assert any(r != 0 for g in groups.values() for r in g), f"every reward is 0: {dict(groups)}"
    assert any(len(set(g)) > 1 for g in groups.values()), f"no group's rewards vary: {dict(groups)}"
    stats = read_token_stats(run_dir / "tokens" / f"step_{step:05d}.npz")
    assert set(stats) == {t.id for t in trajs}
    advantages = np.concatenate([e["advantages"] for e in stats.values()])
    assert advantages.size and np.abs(advantages).max() > 1e-3, "the advantages are all 0"


class Killed(Exception):
    """What ``Preempted`` raises: a run stopped between steps, as a preemption would."""


def preempted_run(cfg: TrainConfig, after_step: int = 1) -> None:
    """Run ``cfg`` and stop it (``Killed``) once step ``after_step`` is done and checkpointed."""
    from agentrl.train import Trainer

    class Preempted(Trainer):
        def train_step(self):
            if self.step == after_step:
                raise Killed
            return super().train_step()

    Preempted(cfg, progress=False).run()
