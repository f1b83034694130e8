"""The engine-neutral episode: the engine is fed the training row's prefixes, and the record equals
a fresh expander's output for the finished trajectory, cut after the last policy token."""

from __future__ import annotations

import asyncio

import numpy as np

from agentrl.env import ResearchEnv
from agentrl.integrations import (
    cut_after_last_policy_token,
    run_episode,
    skyrl_generator_output,
    trl_rollout_fields,
    verl_output_fields,
)
from agentrl.tokens import Expander
from agentrl.trajectory import RewardBreakdown, training_reward
from tests.integrations.helpers import ENV_CONFIG, OracleEngine, expected, tasks, tokenizer


def _episode(engine, task, *, max_completion_tokens=4096, max_new_tokens=256, seed=7):
    exp = Expander(tokenizer())
    return asyncio.run(
        run_episode(
            ResearchEnv(ENV_CONFIG),
            exp,
            engine.generate,
            task=task,
            seed=seed,
            episode_id=f"{task.id}#0",
            max_new_tokens=max_new_tokens,
            max_completion_tokens=max_completion_tokens,
        )
    )


def test_oracle_episode_is_token_in_token_out_and_matches_the_expander():
    task = tasks()[0]
    engine = OracleEngine(tasks())
    ep = _episode(engine, task)
    traj = ep.trajectory
    assert [m.role for m in traj.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert traj.reward is not None and traj.reward.total == sum(
        c.weight for c in traj.reward.criteria if c.weight > 0
    )
    row, rec, last = expected(traj)
    # Every context the engine sampled from is a prefix of the training row (TITO), the first is the prompt.
    assert len(engine.prompts) == 3
    for p in engine.prompts:
        assert row.input_ids[: len(p)].tolist() == p
    assert engine.prompts[0] == rec.prompt_ids
    # The full render agrees with the appended ids (the strict check raises otherwise).
    Expander(tokenizer(), check="strict").expand(traj)
    r = ep.record
    assert r.prompt_ids == rec.prompt_ids
    assert r.completion_ids == rec.completion_ids[:last]
    assert r.loss_mask == rec.loss_mask[:last] and r.loss_mask[-1] == 1
    assert r.rollout_logprobs == rec.rollout_logprobs[:last]
    assert r.token_level_scores == rec.token_level_scores[:last]
    want = training_reward(traj, True)  # run_episode's default normalize, as the native trainer's
    assert r.token_level_scores[-1] == want and sum(r.token_level_scores) == want == 1.0
    # Only what follows the last sampled stop token was cut, and none of it is trainable.
    assert not any(rec.loss_mask[last:]) and not any(rec.token_level_scores[last:])
    # Logprobs: the engine's on sampled tokens, 0.0 on observation tokens.
    sampled = [lp for m in traj.messages if m.role == "assistant" for lp in m.logprobs]
    got = [lp for lp, m in zip(r.rollout_logprobs, r.loss_mask, strict=True) if m]
    assert got == np.asarray(sampled, dtype=np.float32).tolist()  # the row keeps float32 logprobs
    assert all(lp == 0.0 for lp, m in zip(r.rollout_logprobs, r.loss_mask, strict=True) if not m)
    assert r.num_turns == 3 and ep.reward == want


def test_budget_caps_the_completion():
    task = tasks()[1]
    ep = _episode(OracleEngine(tasks()), task, max_completion_tokens=40, max_new_tokens=30)
    assert len(ep.record.completion_ids) <= 40
    assert ep.trajectory.info["truncated_reason"] in ("generation_limit", "max_len")
    assert ep.reward == 0.0  # unanswered: reward 0 with the reason, trainable
    _, rec, last = expected(ep.trajectory)
    assert ep.record.completion_ids == rec.completion_ids[:last]


def test_maps_hand_over_the_record_and_exclude_judge_errors():
    ep = _episode(OracleEngine(tasks()), tasks()[2])
    r = ep.record
    v = verl_output_fields(ep)
    assert (v["prompt_ids"], v["response_ids"], v["response_mask"]) == (
        r.prompt_ids,
        r.completion_ids,
        r.loss_mask,
    )
    assert v["response_logprobs"] == r.rollout_logprobs and v["reward_score"] == ep.reward
    assert v["extra_fields"]["agentrl_token_level_scores"] == r.token_level_scores
    t = trl_rollout_fields([ep, ep])
    assert t["env_mask"] == [r.loss_mask] * 2 and t["completion_ids"] == [r.completion_ids] * 2
    s = skyrl_generator_output([ep], ["x"])
    assert s["rewards"] == [r.token_level_scores] and s["loss_masks"] == [r.loss_mask]
    assert s["stop_reasons"] == ["stop"] and s["trajectory_ids"] == ["x"]
    # A judge error: no reward, nothing trainable handed over.
    ep.trajectory.reward = RewardBreakdown(total=None, status="judge_error", error="timeout")
    bad = ep.__class__(
        ep.trajectory,
        ep.row,
        cut_after_last_policy_token(ep.record.__class__(**{**ep.record.to_dict(), "reward": None})),
    )
    assert verl_output_fields(bad)["response_mask"] == [0] * len(r.loss_mask)
    assert verl_output_fields(bad)["extra_fields"]["agentrl_excluded"] is True
    assert skyrl_generator_output([bad])["loss_masks"] == [[0] * len(r.loss_mask)]
    assert trl_rollout_fields([bad])["agentrl_reward"] == [None]
    assert np.isclose(s["rollout_metrics"]["agentrl/policy_tokens"], sum(r.loss_mask))


def test_importing_the_package_imports_no_engine():
    import subprocess
    import sys

    code = (
        "import sys, agentrl.integrations as i; "
        "print(sorted(m for m in ('verl', 'trl', 'skyrl_gym', 'skyrl', 'datasets', 'vllm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_engine_without_logprobs_hands_over_none_to_verl():
    import dataclasses

    class NoLogprobs(OracleEngine):
        async def generate(self, prompt_ids, max_tokens):
            return dataclasses.replace(await super().generate(prompt_ids, max_tokens), logprobs=None)

    ep = _episode(NoLogprobs(tasks()), tasks()[0])
    assert not any(ep.record.logprobs_known) and set(ep.record.rollout_logprobs) == {0.0}
    assert verl_output_fields(ep)["response_logprobs"] is None
    assert ep.reward > 0
