"""Envs in Ray actors behind ``RayEnv``: the trainer's ``rollout.backend: ray`` gives the local trajectories,
and a proxy steps an oracle episode exactly as a local env does."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'agentrl[ray]')")

from agentrl.env import ResearchEnv
from agentrl.errors import ConfigError
from agentrl.policy import EpisodeContext, OraclePolicy
from agentrl.rollout import episode_seed
from agentrl.rollout.ray_env import RayEnv, RayEnvPool
from agentrl.trajectory import read_trajectories

from .conftest import canon

pytestmark = pytest.mark.ray


def test_trainer_ray_backend_gives_the_local_trajectories(ray_cluster, small_suite, tmp_path):
    from agentrl.train import TrainConfig, Trainer

    def run(backend: str) -> tuple[dict, Trainer]:
        cfg = TrainConfig.model_validate(
            {
                "model": {"path": "tiny:layers=1,hidden=32,heads=2,kv_heads=1", "tokenizer_vocab_size": 600},
                "rollout": {
                    "suite": str(small_suite), "tasks_per_step": 2, "group_size": 2, "max_turns": 2,
                    "max_new_tokens": 12, "max_len": 2048, "backend": backend, "ray_workers": 2,
                    "env": {"search_k": 2, "page_chars": 300, "system_prompt": "Today is {date}. Tools: {tools}"},
                },
                "algorithm": {"mini_batch_size": 2},
                "steps": 1,
                "output_dir": str(tmp_path / backend),
            }
        )  # fmt: skip
        trainer = Trainer(cfg, progress=False)
        trainer.run()
        step = tmp_path / backend / "trajectories" / "step_00001.jsonl"
        return {t.id: canon(t) for t in read_trajectories(step)}, trainer

    local, _ = run("local")
    remote, trainer = run("ray")
    try:
        # Four envs on two hosts (slots 0 and 1 of each), stepped from the trainer's thread pool.
        assert len(trainer.envs) == 4 and {e._slot for e in trainer.envs} == {0, 1}
        assert len(local) == 4 and local == remote
        sampled = [m for t in remote.values() for m in t["messages"] if m["role"] == "assistant"]
        assert sampled and all(m["token_ids"] for m in sampled)
        # The random tiny model answers at once; the oracle's episodes exercise tools through the proxy.
        for i, task in enumerate(trainer.tasks[:2]):
            _same_oracle_episode(trainer.new_env(), ResearchEnv(trainer.env_config), task, i)
    finally:
        trainer.new_env.close()


def _same_oracle_episode(proxy: RayEnv, local: ResearchEnv, task, sample: int) -> None:
    oracle = OraclePolicy(noise=0.5)
    seed = episode_seed(0, task.id, sample)
    assert proxy.reset(seed=seed, options={"task": task}) == local.reset(seed=seed, options={"task": task})
    assert proxy.task.id == task.id and proxy.messages == local.messages
    ctx = EpisodeContext(task_id=task.id, date=task.date, seed=seed, ground_truth=task.ground_truth)
    done = False
    while not done:
        msg = asyncio.run(oracle.act(list(local.messages), ctx))
        got, want = proxy.step(msg), local.step(msg)
        assert got == want and proxy.messages == local.messages
        done = want[2] or want[3]
    assert any(m.role == "tool" for m in proxy.messages)
    assert canon(proxy.trajectory(id="x")) == canon(local.trajectory(id="x"))


def test_more_workers_than_cpus_is_a_clear_error(ray_cluster, small_suite):
    with pytest.raises(ConfigError, match=r"need 3 CPUs .* the Ray cluster has 2"):
        RayEnvPool({"suite": str(small_suite)}, workers=3)
