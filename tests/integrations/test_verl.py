"""verl: our agent loop, subclassing verl's real AgentLoopBase, run on CPU with a fake server manager
(scripted oracle ids), built from examples/verl/agent_loop.yaml exactly as verl's worker builds it,
and checked against our expander; examples/verl/grpo.yaml checked against verl's own config tree.

verl does not co-install with this repo's pins (numpy 2, transformers 5.23): where it is missing,
``verl_side.ensure_verl`` installs it without its dependencies into a side directory (skipped only
when the registry is unreachable). See docs/integrations.md.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.integrations.verl_side import ensure_verl

ensure_verl()
import hydra.utils as hydra_utils  # noqa: E402
import verl.experimental.agent_loop.agent_loop as agent_loop  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from agentrl.errors import ConfigError  # noqa: E402
from agentrl.integrations.mapping import verl_output_fields  # noqa: E402
from agentrl.integrations.verl import AGENT_NAME, ResearchAgentLoop  # noqa: E402
from agentrl.integrations.verl_advantage import ESTIMATOR, register  # noqa: E402
from agentrl.trajectory import training_reward  # noqa: E402
from tests.integrations.helpers import (  # noqa: E402
    OracleEngine,
    expected,
    graded_episodes,
    native_grpo,
    tasks,
    tokenizer,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "verl"


class FakeServerManager:
    """verl's server-manager contract (``generate(request_id, *, prompt_ids, sampling_params)`` →
    ``TokenOutput``) answered by the scripted oracle engine; records every call."""

    def __init__(self, engine: OracleEngine) -> None:
        self.engine = engine
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append({"request_id": request_id, "sampling_params": dict(sampling_params)})
        gen = await self.engine.generate(list(prompt_ids), sampling_params["max_tokens"])
        return TokenOutput(token_ids=gen.token_ids, log_probs=gen.logprobs, stop_reason="completed")


def _loop(server, response_length=4096, adv_estimator=ESTIMATOR, normalize=None):
    registry = OmegaConf.load(EXAMPLES / "agent_loop.yaml")
    entry = next(e for e in registry if e.name == AGENT_NAME)
    if normalize is not None:
        entry.agentrl.normalize = normalize
    trainer = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 2048, "response_length": response_length}},
            "algorithm": {"adv_estimator": adv_estimator},
        }
    )
    # As verl's AgentLoopWorker does: instantiate the registry entry with the loop's arguments.
    return hydra_utils.instantiate(
        config=entry,
        trainer_config=agent_loop.DictConfigWrap(trainer),
        server_manager=server,
        tokenizer=tokenizer(),
        processor=None,
        dataset_cls=None,
        data_config=agent_loop.DictConfigWrap(OmegaConf.create({})),
    )


@pytest.mark.parametrize("normalize", [None, False])  # None: the example's setting, the default
def test_agent_loop_output_is_our_expander_output(normalize):
    task = tasks()[0]
    server = FakeServerManager(OracleEngine(tasks()))
    loop = _loop(server, normalize=normalize)
    assert isinstance(loop, agent_loop.AgentLoopBase) and isinstance(loop, ResearchAgentLoop)
    assert agent_loop._agent_loop_registry[AGENT_NAME]["_target_"].endswith("ResearchAgentLoop")
    row = {"extra_info": {"task_id": task.id, "index": 3}, "raw_prompt": [], "index": 3}
    out = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0}, **row))
    assert isinstance(out, agent_loop.AgentLoopOutput)
    assert len({c["request_id"] for c in server.calls}) == 1  # one sticky session per episode
    assert all(c["sampling_params"]["temperature"] == 1.0 for c in server.calls)

    # The same trajectory, expanded by a fresh expander: the fields verl got must equal it.
    traj = loop.episode.trajectory
    assert traj.task_id == task.id and traj.info["seed"] == 3
    _, rec, last = expected(traj, normalize=normalize is not False)
    assert out.prompt_ids == rec.prompt_ids
    assert out.response_ids == rec.completion_ids[:last]
    assert out.response_mask == rec.loss_mask[:last]
    assert out.response_logprobs == rec.rollout_logprobs[:last]
    assert out.reward_score == pytest.approx(training_reward(traj, normalize is not False))
    assert out.reward_score > 0
    assert (out.reward_score == traj.reward.total) == (normalize is False)  # a weighted-sum rubric
    assert out.num_turns == len(traj.messages) == 7
    # verl's own conversion puts the scalar on the last response token: our last policy token.
    d = out.as_dict() if hasattr(out, "as_dict") else None
    if d is not None:
        np.testing.assert_array_equal(
            d["rm_scores"].numpy(), np.asarray(rec.token_level_scores[:last], np.float32)
        )
        assert d["response_mask"].tolist() == rec.loss_mask[:last]
    assert out.extra_fields["agentrl_token_level_scores"] == rec.token_level_scores[:last]
    assert out.metrics.generate_sequences >= 0 and out.metrics.tool_calls > 0


def test_response_length_caps_the_episode():
    server = FakeServerManager(OracleEngine(tasks()))
    out = asyncio.run(_loop(server, response_length=48).run({}, extra_info={"task_id": tasks()[1].id}))
    assert len(out.response_ids) <= 48 and out.reward_score == 0.0
    assert len(out.response_mask) == len(out.response_ids) == len(out.response_logprobs)


def test_grpo_example_keys_exist_in_verls_config():
    import importlib

    import verl.trainer.config as cfg_pkg
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(cfg_pkg.__file__).parent), version_base=None):
        base = OmegaConf.to_container(compose(config_name="ppo_trainer"), resolve=False)
    ours = OmegaConf.to_container(OmegaConf.load(EXAMPLES / "grpo.yaml"), resolve=False)
    ours.pop("hydra"), ours.pop("defaults")

    def leaves(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict) and v:
                yield from leaves(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}"

    def has(d, dotted):
        for part in dotted.split("."):
            if not isinstance(d, dict) or part not in d:
                return False
            d = d[part]
        return True

    # Ray's own runtime_env key (verl passes runtime_env to ray.init): it registers our estimator in
    # verl's driver, where advantages are computed.
    hook = "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"
    missing = [k for k in leaves(ours) if not has(base, k) and k != hook]
    assert not missing, f"examples/verl/grpo.yaml sets keys verl's ppo_trainer does not have: {missing}"
    assert ours["algorithm"]["adv_estimator"] == ESTIMATOR
    target = ours["ray_kwargs"]["ray_init"]["runtime_env"]["worker_process_setup_hook"]
    module, fn = target.rsplit(".", 1)
    assert getattr(importlib.import_module(module), fn) is register
    # The whole example composes with verl's config tree as `main_ppo --config-name grpo` does.
    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        cfg = compose(config_name="grpo")
    assert (
        cfg.algorithm.adv_estimator == ESTIMATOR and cfg.ray_kwargs.ray_init.runtime_env[hook.rsplit(".")[-1]]
    )


# ---- a judge failure stays out of its group's baseline, computed by verl's own advantage code


def _verl_batch(episodes):
    """The episodes as verl's trainer holds them: each ``AgentLoopOutput.as_dict()`` (``rm_scores``
    on the last response token, ``response_mask``), right-padded, ``uid`` one per task (group)."""
    from verl import DataProto

    rows = [
        agent_loop.AgentLoopOutput(metrics=agent_loop.AgentLoopMetrics(), **verl_output_fields(e)).as_dict()
        for e in episodes
    ]
    T = max(len(r["response_mask"]) for r in rows)
    scores = torch.zeros(len(rows), T)
    mask = torch.zeros(len(rows), T, dtype=torch.int64)
    for i, r in enumerate(rows):
        scores[i, : len(r["rm_scores"])] = r["rm_scores"]
        mask[i, : len(r["response_mask"])] = r["response_mask"]
    uid = np.array([e.trajectory.task_id for e in episodes], dtype=object)
    return DataProto.from_dict(
        tensors={"token_level_rewards": scores, "response_mask": mask}, non_tensors={"uid": uid}
    )


def _advantages(episodes, estimator):
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data = compute_advantage(_verl_batch(episodes), adv_estimator=estimator, config=AlgoConfig())
    adv, mask = data.batch["advantages"], data.batch["response_mask"].bool()
    return {
        e.trajectory.id: (float(adv[i][mask[i]][0]) if mask[i].any() else 0.0, adv[i])
        for i, e in enumerate(episodes)
    }


def test_a_judge_error_stays_out_of_its_group_baseline_in_verls_own_grpo():
    episodes = graded_episodes()
    failed = next(e for e in episodes if e.reward is None)
    assert verl_output_fields(failed)["extra_fields"]["agentrl_excluded"] is True
    ours = _advantages(episodes, ESTIMATOR)  # through verl's trainer dispatch and registry
    without = _advantages([e for e in episodes if e is not failed], "grpo")  # verl's stock GRPO
    # The failed member trains on nothing; its group-mates get what verl's GRPO gives the group
    # without it; and the native trainer, fed the same trajectories, agrees on every one.
    assert not ours[failed.trajectory.id][1].any()
    native = native_grpo(episodes)
    assert set(native) == set(without)
    for tid, (adv, _) in without.items():
        assert ours[tid][0] == pytest.approx(adv, abs=1e-6)
        assert native[tid][1] == pytest.approx(adv, abs=1e-5)
        ep = next(e for e in episodes if e.trajectory.id == tid)
        assert native[tid][0] == verl_output_fields(ep)["reward_score"] == ep.reward
    # verl's stock GRPO would have let the failed member's 0 into the baseline (what the adapter prevents).
    stock = _advantages(episodes, "grpo")
    mates = [e.trajectory.id for e in episodes if e.trajectory.task_id == failed.trajectory.task_id]
    assert any(abs(stock[t][0] - without[t][0]) > 0.05 for t in mates if t != failed.trajectory.id)


def test_verls_v1_trainer_dispatch_uses_the_estimator_too():
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    episodes = graded_episodes()
    data = _verl_batch(episodes)
    keys = [f"{e.trajectory.task_id}_{k}_0" for k, e in enumerate(episodes)]
    got = compute_advantage_for_multi_trajectories(data, keys, ESTIMATOR, config=AlgoConfig())
    want = _advantages(episodes, ESTIMATOR)
    for i, e in enumerate(episodes):
        assert torch.equal(got.batch["advantages"][i], want[e.trajectory.id][1])


def test_the_agent_loop_refuses_an_estimator_that_would_take_a_judge_error_into_a_baseline():
    server = FakeServerManager(OracleEngine(tasks()))
    for name in ("grpo", "rloo", "grpo_vectorized"):
        with pytest.raises(Exception, match=ESTIMATOR) as err:  # hydra wraps it in its own error
            _loop(server, adv_estimator=name)
        assert isinstance(err.value, ConfigError) or isinstance(err.value.__cause__, ConfigError)
    for name in (ESTIMATOR, "gae", "reinforce_plus_plus"):
        assert isinstance(_loop(server, adv_estimator=name), ResearchAgentLoop)
