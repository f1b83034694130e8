"""One episode-seed function, ``agentrl.seeds.episode_seed``: its two forms are the documented hashes
(the values runs drew before it was one function), and every path that starts episodes uses it —
the trainer's steps and the TRL adapter here; ``agentrl rollout``, the Ray env proxy and the
evaluation during training in their own tests."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

from agentrl.seeds import episode_seed


def _sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def test_both_forms_are_the_documented_hashes():
    # agentrl rollout / eval: (seed, task, sample), the first 4 bytes, 31 bits.
    assert episode_seed(3, "t", 2) == int.from_bytes(_sha("3:t:2")[:4], "big") & 0x7FFFFFFF
    # A training step: (seed, step, task, sample), the first 8 bytes, 31 bits (the trainer's values
    # before this function: existing runs and the quickstart draw the same episodes).
    assert episode_seed(3, "t", 2, step=5) == int.from_bytes(_sha("3:5:t:2")[:8], "big") & 0x7FFFFFFF
    assert episode_seed(3, "t", 2, step=0) != episode_seed(3, "t", 2)


def test_the_trainer_seeds_each_step_s_episodes_with_it():
    from agentrl.train import trainer as trainer_module
    from agentrl.train.config import TrainConfig

    cfg = TrainConfig.model_validate({"seed": 7, "rollout": {"tasks_per_step": 2, "group_size": 3}})
    t = trainer_module.Trainer(cfg)
    t.tasks = [SimpleNamespace(id=f"task-{i}") for i in range(4)]
    for step in (1, 2):
        jobs = t._jobs(step)
        assert [j.seed for j in jobs] == [episode_seed(7, j.task.id, j.sample, step=step) for j in jobs]
        assert all(j.info["seed"] == j.seed and j.info["sample"] == j.sample for j in jobs)
        assert sorted(j.sample for j in jobs) == [0, 0, 1, 1, 2, 2]


def test_the_trl_adapter_seeds_prompt_k_of_call_c_with_it():
    from agentrl.integrations.task_data import task_rows
    from agentrl.integrations.trl import make_rollout_func
    from agentrl.trajectory import Trajectory
    from tests.integrations.helpers import ENV_CONFIG, OracleEngine, tasks, tokenizer

    engine = OracleEngine(tasks())

    async def generate_batch(prompts, max_tokens):
        return [await engine.generate(p, m) for p, m in zip(prompts, max_tokens, strict=True)]

    rows = task_rows(ENV_CONFIG, engine="trl", limit=2)
    rollout = make_rollout_func(
        {"env": ENV_CONFIG, "max_new_tokens": 256},
        generate_batch=generate_batch,
        tokenizer=tokenizer(),
        seed=4,
    )
    prompts = [rows[0]["prompt"], rows[0]["prompt"], rows[1]["prompt"]]
    for call in (0, 1):
        trajs = [Trajectory.model_validate_json(s) for s in rollout(prompts, None)["agentrl_trajectory"]]
        assert [t.info["seed"] for t in trajs] == [
            episode_seed(4, t.task_id, k, step=call) for k, t in enumerate(trajs)
        ]
