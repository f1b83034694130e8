"""The trainer on episodes longer than ``max_len`` (``rollout.context.strategy: drop_observations`` or
``summarize``):
the scripted oracle, in token mode through the trainer's own episode loop, answers multi-source
tasks of ``examples/long-horizon-env``; the step trains one row per context segment, logs each
row's token numbers under its row id, and GRPO gives every segment its episode's advantage."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch

from agentrl.policy import OraclePolicy
from agentrl.rollout.episode import Generation, run_episodes
from agentrl.rundir import RunDir, read_token_stats
from agentrl.tokens import segment_row_id
from agentrl.train import Trainer
from agentrl.trajectory.context import segments
from tests.train.learning_signal import train_config

SUITE = str(Path(__file__).resolve().parents[2] / "examples" / "long-horizon-env")
MAX_LEN = 3000


class _OracleEngine:
    """The trainer's rollout engine played by the scripted oracle: the trainer's expander, stop ids
    and limits (context policy included), the oracle's turns as token ids."""

    def __init__(self, trainer: Trainer) -> None:
        self.t, self.oracle = trainer, OraclePolicy(0.0)
        self.batches: list[Any] = []

    def rollout(self, envs, specs):  # type: ignore[no-untyped-def]
        lp, tok = self.t.engine_loop, self.t.tokenizer
        stop = min(lp.stop_ids)

        async def gen(req):  # type: ignore[no-untyped-def]
            msg = await self.oracle.act(req.messages, req.context())
            ids = [*tok.encode(msg.text, add_special_tokens=False), stop][: req.max_tokens]
            return Generation(ids, [-0.5] * len(ids))

        res = asyncio.run(
            run_episodes(envs, specs, generate=gen, expander=lp.expander, stop_ids=lp.stop_ids,
                         limits=lp.limits, executor=lp.executor)
        )  # fmt: skip
        return [r.trajectory for r in res]

    def after_update(self, model, step):  # type: ignore[no-untyped-def]
        pass

    def prepare(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("strategy", "algorithm"),
    [("drop_observations", "grpo"), ("drop_observations", "ppo"), ("summarize", "grpo")],
)
def test_a_step_on_long_episodes_trains_every_segment(tmp_path, strategy, algorithm):
    over = {
        "rollout.suite": SUITE,
        "rollout.max_len": MAX_LEN,
        "rollout.max_new_tokens": 400,
        "rollout.max_turns": 8,
        "rollout.context": {"strategy": strategy, "trigger_tokens": 2000},
        "rollout.env": {},
        "judge": {},
        "algorithm.name": algorithm,
        "algorithm.mini_batch_size": 4,
        "algorithm.micro_batch_tokens": 4096,
        "rollout.tasks_per_step": 2,
        "rollout.group_size": 2,
        "sft_steps": 0,
        "steps": 1,
    }
    t = Trainer(train_config(tmp_path, **over), progress=False)
    t.setup()
    multi = [task for task in t.tasks if task.ground_truth.get("steps")]
    t.tasks[:] = multi  # the step samples multi-source tasks only
    t.engine_loop = t.engine.loop
    t.engine = _OracleEngine(t)
    m = t.train_step()
    trajs = list(RunDir(t.out).trajectory_files().values())
    from agentrl.trajectory import read_trajectories

    step_trajs = list(read_trajectories(trajs[0]))
    segs = [len(segments(x)) for x in step_trajs]
    kinds = {r["strategy"] for x in step_trajs for r in x.info.get("context_segments", [])}
    assert strategy in kinds
    assert max(segs) > 1 and all(x.info.get("status") == "answered" for x in step_trajs)
    assert m["train/skipped_update"] == 0.0 and all(torch.isfinite(torch.tensor(v)) for v in m.values())
    stats = read_token_stats(RunDir(t.out).token_file(1))
    assert len(stats) == sum(segs)  # a row per segment, each under its own id
    rows = {segment_row_id(x.id, k) for x, n in zip(step_trajs, segs, strict=True) for k in range(n)}
    assert set(stats) == rows
    if algorithm == "grpo":  # every segment of an episode has its episode's advantage
        for x, n in zip(step_trajs, segs, strict=True):
            adv = {float(stats[segment_row_id(x.id, k)]["advantages"][0]) for k in range(n)}
            assert len(adv) == 1, (x.id, adv)
    t.pool.shutdown(wait=False)
    t.judge.close()
