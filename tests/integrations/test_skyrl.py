"""SkyRL: our env through skyrl-gym's real registry and text API (rewards equal our env's), and our
generator with a fake inference client (scripted oracle ids): its GeneratorOutput carries our
expander's ids, masks, logprobs and per-token scores. Skipped without skyrl-gym."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

skyrl_gym = pytest.importorskip(
    "skyrl_gym", reason="skyrl-gym is not installed (pip install 'agentrl[skyrl]')"
)

from agentrl.env import ResearchEnv  # noqa: E402
from agentrl.integrations.skyrl import ENV_ID, ResearchGenerator, ResearchTextEnv, register_env  # noqa: E402
from agentrl.integrations.task_data import task_rows  # noqa: E402
from agentrl.policy import OraclePolicy  # noqa: E402
from agentrl.policy.base import EpisodeContext  # noqa: E402
from agentrl.trajectory import RewardBreakdown, training_reward  # noqa: E402
from tests.integrations.helpers import ENV_CONFIG, OracleEngine, expected, tasks, tokenizer  # noqa: E402

SETTINGS = {"env": ENV_CONFIG, "max_new_tokens": 256}


def test_skyrl_gym_env_gives_our_env_rewards_and_observations():
    assert register_env() == ENV_ID and ENV_ID in skyrl_gym.registry
    task = tasks()[0]
    env = skyrl_gym.make(ENV_ID, env_config=SETTINGS, extras={"task_id": task.id, "seed": 5})
    assert isinstance(env, ResearchTextEnv)
    ours = ResearchEnv(ENV_CONFIG)
    ours.reset(seed=5, options={"task": task})
    chat, meta = env.init([{"role": "user", "content": "ignored: the env builds the prompt"}])
    assert meta == {"task_id": task.id}
    assert chat == [{"role": m.role, "content": m.text} for m in ours.messages]
    policy = OraclePolicy()
    ctx = EpisodeContext(task_id=task.id, date=task.date, seed=5, ground_truth=task.ground_truth)
    done, steps = False, 0
    while not done:
        action = asyncio.run(policy.act(list(ours.messages), ctx)).text
        out = env.step(action)
        _, reward, terminated, truncated, info = ours.step(action)
        if terminated:  # the rubric score, normalised as the native trainer's default
            reward = training_reward(RewardBreakdown.model_validate(info["reward_breakdown"]), True)
        assert out["reward"] == reward and out["done"] == (terminated or truncated)
        assert [o["content"] for o in out["observations"]] == [m["content"] for m in info["messages"]]
        done, steps = out["done"], steps + 1
    assert steps == 3 and out["reward"] > 0
    assert env.get_metrics()["tool_calls"] == 2


def test_env_without_task_id_is_a_config_error():
    from agentrl.errors import ConfigError

    with pytest.raises(ConfigError, match="task_id"):
        ResearchTextEnv(SETTINGS, {"seed": 1})


@dataclass
class FakeClient:
    """SkyRL's inference-client contract answered by the scripted oracle engine."""

    engine: OracleEngine

    async def generate(self, request):
        assert request["prompts"] is None and len(request["prompt_token_ids"]) == 1
        gen = await self.engine.generate(
            request["prompt_token_ids"][0], request["sampling_params"]["max_tokens"]
        )
        return {
            "responses": [self.engine.tok.decode(gen.token_ids)],
            "response_ids": [gen.token_ids],
            "stop_reasons": ["stop"],  # SkyRL's own word, which agentrl does not read
            "response_logprobs": [gen.logprobs],
        }


def test_generator_output_is_our_expander_output_with_per_token_rewards():
    rows = task_rows(ENV_CONFIG, engine="skyrl", limit=2)
    gen = ResearchGenerator(
        FakeClient(OracleEngine(tasks())), tokenizer(), SETTINGS, max_completion_tokens=4096
    )
    batch = {
        "prompts": [r["prompt"] for r in rows],
        "env_classes": [r["env_class"] for r in rows],
        "env_extras": [{"task_id": r["task_id"], "seed": r["seed"]} for r in rows],
        "sampling_params": {"temperature": 1.0},
        "trajectory_ids": None,
    }
    out = asyncio.run(gen.generate(batch))
    assert out["stop_reasons"] == ["stop", "stop"] and out["trajectory_ids"] is None
    for k, ep in enumerate(gen.episodes):
        traj = ep.trajectory
        assert traj.task_id == rows[k]["task_id"]
        _, rec, last = expected(traj)
        assert out["prompt_token_ids"][k] == rec.prompt_ids
        assert out["response_ids"][k] == rec.completion_ids[:last]
        assert out["loss_masks"][k] == rec.loss_mask[:last]
        assert out["rollout_logprobs"][k] == rec.rollout_logprobs[:last]
        assert out["rewards"][k] == rec.token_level_scores[:last]
        want = training_reward(traj, True)  # the settings' default normalize, as the native trainer's
        assert out["rewards"][k][-1] == pytest.approx(want) and sum(out["rewards"][k]) == pytest.approx(want)
        assert want > 0
    assert out["rollout_metrics"]["agentrl/excluded"] == 0.0


# ---- a judge failure is never a number, and never enters a group baseline


def _answer_llm_task(env_cfg):
    from tests.env.conftest import ALPHABET, call

    env = skyrl_gym.make(
        ENV_ID,
        env_config={"env": {"suite": str(ALPHABET), **env_cfg}},
        extras={"task_id": "alphabet-2025-cloud-llm"},
    )
    env.init([])
    return env.step(call("answer", report="Q1 2025 Google Cloud revenue was $12.3 billion \\cite{x}."))


def test_a_failed_judge_gives_nan_and_judge_error_never_zero():
    import math

    from tests.judge.fake_server import FakeJudgeServer

    register_env()
    with FakeJudgeServer() as server:  # the real litellm path; HTTP 400 is not retried
        out = _answer_llm_task(
            {"judge": "inline", "judge_model": "http400:skyrl", "judge_api_base": server.url}
        )
    assert out["done"] and math.isnan(out["reward"])
    assert out["metadata"]["reward_status"] == "judge_error"
    # An answer left for a judge this env was not given: no number either.
    out = _answer_llm_task({"judge": "deferred"})
    assert out["done"] and math.isnan(out["reward"]) and out["metadata"]["reward_status"] == "unscored"


def skyrl_grpo(rewards, loss_masks, uids, eps=1e-6):
    """SkyRL's documented GRPO outcome advantage (``compute_grpo_outcome_advantage`` in
    skyrl_train/utils/ppo_utils.py; skyrl-train needs Python 3.12 and does not install here): the
    score is the sum of a sample's per-token rewards; a group (same uid) of one gets mean 0 and
    std 1, a larger one its mean and unbiased std; A = (score − mean) / (std + eps) on every token,
    times the loss mask. Returns one advantage list per sample."""
    import statistics

    scores = [sum(r) for r in rewards]
    by = {}
    for s, u in zip(scores, uids, strict=True):
        by.setdefault(u, []).append(s)
    stats = {
        u: (0.0, 1.0) if len(v) == 1 else (statistics.mean(v), statistics.stdev(v)) for u, v in by.items()
    }
    return [
        [(s - stats[u][0]) / (stats[u][1] + eps) * m for m in mask]
        for s, mask, u in zip(scores, loss_masks, uids, strict=True)
    ]


def test_generator_output_drops_a_group_with_a_judge_error_and_counts_it():
    from agentrl.integrations.mapping import skyrl_generator_output
    from tests.integrations.helpers import graded_episodes, native_grpo

    episodes = graded_episodes()
    uids = [e.trajectory.task_id for e in episodes]
    ids = [{"instance_id": u, "repetition_id": k} for k, u in enumerate(uids)]
    out = skyrl_generator_output(episodes, ids)
    adv = skyrl_grpo(out["rewards"], out["loss_masks"], uids)
    failed = next(e for e in episodes if e.reward is None).trajectory.task_id
    native = native_grpo(episodes)  # the native trainer on the same trajectories
    for k, e in enumerate(episodes):
        if uids[k] == failed:  # SkyRL keeps every sample: the whole group is dropped
            assert not any(out["loss_masks"][k]) and not any(out["rewards"][k]) and not any(adv[k])
        else:
            assert out["loss_masks"][k] == e.record.loss_mask
            assert sum(out["rewards"][k]) == native[e.trajectory.id][0] == e.reward
            on = [a for a, m in zip(adv[k], out["loss_masks"][k], strict=True) if m]
            assert on and all(a == pytest.approx(native[e.trajectory.id][1], abs=1e-5) for a in on)
    m = out["rollout_metrics"]
    assert (m["agentrl/excluded"], m["agentrl/dropped_groups"], m["agentrl/dropped_samples"]) == (
        1.0,
        1.0,
        4.0,
    )
    # SkyRL's TrajectoryID objects (attributes), and no ids at all (groups are then the tasks): the same drop.
    from types import SimpleNamespace

    objs = [SimpleNamespace(**i) for i in ids]
    assert skyrl_generator_output(episodes, objs)["loss_masks"] == out["loss_masks"]
    assert skyrl_generator_output(episodes)["loss_masks"] == out["loss_masks"]


def test_the_generator_refuses_context_management_without_step_wise():
    from agentrl.errors import ConfigError
    from tests.integrations.segmented import SETTINGS as LONG

    client = FakeClient(OracleEngine(tasks()))
    with pytest.raises(ConfigError, match=r"step_wise_trajectories=true"):
        ResearchGenerator(client, tokenizer(), LONG)
    assert ResearchGenerator(client, tokenizer(), LONG, step_wise=True).step_wise
