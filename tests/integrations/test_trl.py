"""TRL: the rollout function hands over our expander's ids, env_mask and logprobs, one episode per
prompt, turns batched in lock-step; the async reward function returns the env's score (None for a
judge error). Then the same functions inside TRL's real GRPOTrainer on CPU (skipped without trl)."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

from agentrl.integrations.task_data import task_rows
from agentrl.integrations.trl import make_reward_func, make_rollout_func
from agentrl.trajectory import RewardBreakdown, Trajectory, training_reward
from tests.integrations.helpers import ENV_CONFIG, OracleEngine, expected, tasks, tokenizer

SETTINGS = {"env": ENV_CONFIG, "max_new_tokens": 256}


class BatchedOracle:
    """A batched engine (TRL's ``generate_batch`` shape) that records the size of each call."""

    def __init__(self) -> None:
        self.engine = OracleEngine(tasks())
        self.sizes: list[int] = []

    async def __call__(self, prompts, max_tokens):
        self.sizes.append(len(prompts))
        return [await self.engine.generate(p, m) for p, m in zip(prompts, max_tokens, strict=True)]


def _check_against_expander(out, k):
    traj = Trajectory.model_validate_json(out["agentrl_trajectory"][k])
    _, rec, last = expected(traj)
    assert out["prompt_ids"][k] == rec.prompt_ids
    assert out["completion_ids"][k] == rec.completion_ids[:last]
    assert out["env_mask"][k] == rec.loss_mask[:last]
    assert out["logprobs"][k] == rec.rollout_logprobs[:last]
    assert out["agentrl_reward"][k] == training_reward(traj, True) == rec.reward
    return traj


def test_rollout_func_hands_over_the_expander_row_and_batches_turns():
    rows = task_rows(ENV_CONFIG, engine="trl", limit=2)
    engine = BatchedOracle()
    rollout = make_rollout_func(SETTINGS, generate_batch=engine, tokenizer=tokenizer())
    prompts = [rows[0]["prompt"], rows[0]["prompt"], rows[1]["prompt"]]
    out = rollout(prompts, None)
    assert engine.sizes == [3, 3, 3]  # three oracle turns, every live episode in each call
    trajs = [_check_against_expander(out, k) for k in range(3)]
    assert [t.task_id for t in trajs] == [rows[0]["task_id"], rows[0]["task_id"], rows[1]["task_id"]]
    assert len({t.info["seed"] for t in trajs}) == 3  # each episode its own seed
    reward = make_reward_func(SETTINGS)
    assert reward.__name__ == "agentrl_reward"
    got = asyncio.run(reward(prompts, [None] * 3, out["agentrl_trajectory"]))
    assert got == [training_reward(t, True) for t in trajs] and all(g > 0 for g in got)
    # A judge error, and an answer left for a judge that is not configured: no reward, never 0.
    bad = trajs[0].model_copy(update={"reward": RewardBreakdown(total=None, status="judge_error")})
    pending = trajs[1].model_copy(update={"reward": None, "info": {**trajs[1].info, "needs_judge": True}})
    got = asyncio.run(reward(prompts[:2], [None] * 2, [bad.model_dump_json(), pending.model_dump_json()]))
    assert got == [None, None]


def test_unknown_prompt_is_a_config_error():
    from agentrl.errors import ConfigError

    rollout = make_rollout_func(SETTINGS, generate_batch=BatchedOracle(), tokenizer=tokenizer())
    with pytest.raises(ConfigError, match="no task"):
        rollout([[{"role": "user", "content": "not a task of this suite"}]], None)


def test_grpo_trainer_trains_on_what_the_rollout_handed_over(tmp_path):
    pytest.importorskip("trl", reason="trl is not installed (pip install 'agentrl[trl]')")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

    rows = task_rows(ENV_CONFIG, engine="trl", limit=2)
    trainer = _tiny_grpo_trainer(
        tmp_path, rows, 2, make_rollout_func(SETTINGS, generate_batch=BatchedOracle())
    )
    inputs = [dict(rows[0]), dict(rows[1])]
    batch = trainer._generate_and_score_completions(inputs)
    for k, inp in enumerate(inputs):  # TRL merged our extra fields into its inputs
        traj = Trajectory.model_validate_json(inp["agentrl_trajectory"])
        _, rec, last = expected(traj)
        n = int(batch["completion_mask"][k].sum())
        assert n == last
        assert batch["completion_ids"][k, :n].tolist() == rec.completion_ids[:last]
        assert batch["tool_mask"][k, :n].tolist() == rec.loss_mask[:last]
        p = int(batch["prompt_mask"][k].sum())
        assert batch["prompt_ids"][k, -p:].tolist() == rec.prompt_ids
        np.testing.assert_allclose(
            batch["sampling_per_token_logps"][k, :n].numpy(),
            np.asarray(rec.rollout_logprobs[:last]),
            rtol=1e-6,
        )
    want = np.mean(
        [training_reward(Trajectory.model_validate_json(i["agentrl_trajectory"]), True) for i in inputs]
    )
    assert trainer._metrics["train"]["rewards/agentrl_reward/mean"] == [pytest.approx(want)]


def test_a_judge_error_stays_out_of_trls_group_baseline(tmp_path):
    """TRL's own GRPO (the real trainer's ``_generate_and_score_completions``) on a group of four with
    one judge error: the other three get what TRL gives the group of three without it, and what the
    native trainer gives them on the same trajectories."""
    pytest.importorskip("trl", reason="trl is not installed (pip install 'agentrl[trl]')")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

    from agentrl.integrations.mapping import trl_rollout_fields
    from tests.integrations.helpers import graded_episodes, native_grpo

    episodes = graded_episodes({0: [2.5, 1.0, None, 0.5]})
    kept = [k for k, e in enumerate(episodes) if e.reward is not None]

    def rollout(prompts, trainer):  # what our rollout_func hands TRL for these episodes
        return trl_rollout_fields(episodes if len(prompts) == len(episodes) else [episodes[k] for k in kept])

    row = task_rows(ENV_CONFIG, engine="trl", limit=1)[0]
    assert row["task_id"] == episodes[0].trajectory.task_id
    # the graded episodes carry bare rubric totals: trained on as totals, as native_grpo does
    trainer = _tiny_grpo_trainer(tmp_path, [row], 4, rollout, normalize=False)
    with_error = trainer._generate_and_score_completions([dict(row) for _ in range(4)])["advantages"]
    trainer.num_generations = 3  # the same group without the failed member, through the same code
    without = trainer._generate_and_score_completions([dict(row) for _ in range(3)])["advantages"]
    native = native_grpo(episodes)
    assert with_error[2].item() == 0.0  # the failed member: no advantage
    for j, k in enumerate(kept):
        assert with_error[k].item() == pytest.approx(without[j].item(), abs=1e-6)
        # TRL divides by std + 1e-4, the native trainer by std + 1e-6.
        assert with_error[k].item() == pytest.approx(native[episodes[k].trajectory.id][1], rel=1e-3)
    assert np.std([with_error[k].item() for k in kept]) > 0.5  # rewards vary within the group


def _tiny_grpo_trainer(tmp_path, rows, n, rollout_func, normalize=True):
    """TRL's GRPOTrainer on a 1-layer Llama, ``n`` generations per prompt (one step on the CPU),
    rewarded by our reward function (``normalize`` as its settings'), with ``rollout_func`` as its
    rollout."""
    import torch
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    tok = tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
    )
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=n,
        num_generations=n,
        max_completion_length=64,
        use_cpu=True,
        report_to=[],
        max_steps=1,
        bf16=False,
    )
    return GRPOTrainer(
        model=LlamaForCausalLM(cfg),
        processing_class=tok,
        reward_funcs=[make_reward_func({**SETTINGS, "normalize": normalize})],
        args=args,
        train_dataset=Dataset.from_list(rows),
        rollout_func=rollout_func,
    )
