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
            "stop_reasons": [gen.finish_reason],
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
        assert out["rewards"][k][-1] == traj.reward.total > 0 and sum(out["rewards"][k]) == traj.reward.total
    assert out["rollout_metrics"]["agentrl/excluded"] == 0.0
