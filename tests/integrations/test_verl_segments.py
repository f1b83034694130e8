"""verl with episodes whose context was rewritten: our agent loop (verl's real ``AgentLoopBase``,
built from examples/verl/agent_loop.yaml) returns one ``AgentLoopOutput`` per context segment, each
exactly its ``expand_segments`` row; verl's v1 advantage step, wrapped by ``register``, gives every
segment its episode's ``agentrl_grpo`` advantage with each episode counted once (compared with
verl's own GRPO over one output per episode and with the native trainer), a judge failure still
outside the baseline. verl comes from ``verl_side.ensure_verl`` as in test_verl.py."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from tests.integrations.verl_side import ensure_verl

ensure_verl()
import verl.experimental.agent_loop.agent_loop as agent_loop  # noqa: E402

from agentrl.errors import ConfigError  # noqa: E402
from agentrl.integrations.mapping import verl_outputs  # noqa: E402
from agentrl.integrations.verl import ResearchAgentLoop  # noqa: E402
from agentrl.integrations.verl_advantage import ESTIMATOR, per_episode_advantage, register  # noqa: E402
from agentrl.tokens import segment_row_id  # noqa: E402
from tests.integrations.helpers import graded_episodes, native_grpo, tokenizer  # noqa: E402
from tests.integrations.segmented import (  # noqa: E402
    SETTINGS,
    ReplayEngine,
    expected_samples,
    graded_segmented,
    task_ids,
)
from tests.integrations.test_verl import EXAMPLES, FakeServerManager  # noqa: E402


def _build(server, use_v1=None):
    """Our loop as verl's worker builds it, with ``SETTINGS`` as its ``agentrl`` block."""
    import hydra.utils as hydra_utils
    from omegaconf import OmegaConf

    registry = OmegaConf.load(EXAMPLES / "agent_loop.yaml")
    entry = next(e for e in registry if e.name == "agentrl_research")
    entry.agentrl = OmegaConf.create(SETTINGS)
    trainer = {
        "actor_rollout_ref": {"rollout": {"prompt_length": 2048, "response_length": 4096}},
        "algorithm": {"adv_estimator": ESTIMATOR},
    }
    if use_v1 is not None:
        trainer["trainer"] = {"use_v1": use_v1}
    return hydra_utils.instantiate(
        config=entry,
        trainer_config=agent_loop.DictConfigWrap(OmegaConf.create(trainer)),
        server_manager=server,
        tokenizer=tokenizer(),
        processor=None,
        dataset_cls=None,
        data_config=agent_loop.DictConfigWrap(OmegaConf.create({})),
    )


def test_the_agent_loop_returns_one_output_per_segment_each_its_row():
    server = FakeServerManager(ReplayEngine())
    loop = _build(server, use_v1=True)
    row = {"extra_info": {"task_id": task_ids()[0], "seed": 0}, "raw_prompt": [], "index": 0}
    outs = asyncio.run(loop.run({"temperature": 1.0}, **row))
    assert isinstance(loop, ResearchAgentLoop) and isinstance(outs, list) and len(outs) >= 3
    assert all(isinstance(o, agent_loop.AgentLoopOutput) for o in outs)
    assert len({c["request_id"] for c in server.calls}) == 1  # one sticky session per episode
    traj = loop.episode.trajectory
    want = expected_samples(traj)
    assert len(want) == len(outs)
    for k, (o, (ids, mask, _)) in enumerate(zip(outs, want, strict=True)):
        assert o.prompt_ids + o.response_ids == ids  # token for token
        assert o.response_mask == mask[len(o.prompt_ids) :]
        assert o.reward_score == 1.0  # the episode's outcome on every segment
        assert o.extra_fields["agentrl_trajectory_id"] == segment_row_id(traj.id, k)
        d = (
            o.as_dict()
        )  # verl's own conversion: the reward on the last response token = our last policy token
        assert d["rm_scores"][-1].item() == 1.0 and d["response_mask"][-1].item() == 1
    # verl's legacy worker takes one output per sample: context management is refused there
    with pytest.raises(Exception, match=r"trainer\.use_v1=true") as err:
        _build(server, use_v1=False)
    assert isinstance(err.value, ConfigError) or isinstance(err.value.__cause__, ConfigError)


def _v1_batch(episodes):
    """The episodes' outputs as verl's v1 trainer holds them: ``rm_scores`` and ``response_mask``
    per output, right-padded, ``uid`` one per task, keys ``{uid}_{session}_{k}``."""
    from verl import DataProto

    rows, uids, keys = [], [], []
    for s, e in enumerate(episodes):
        for k, fields in enumerate(verl_outputs(e)):
            out = agent_loop.AgentLoopOutput(metrics=agent_loop.AgentLoopMetrics(), **fields)
            rows.append(out.as_dict())
            uids.append(e.trajectory.task_id)
            keys.append(f"{e.trajectory.task_id}_{s}_{k}")
    T = max(len(r["response_mask"]) for r in rows)
    scores = torch.zeros(len(rows), T)
    mask = torch.zeros(len(rows), T, dtype=torch.int64)
    for i, r in enumerate(rows):
        scores[i, : len(r["rm_scores"])] = r["rm_scores"]
        mask[i, : len(r["response_mask"])] = r["response_mask"]
    data = DataProto.from_dict(
        tensors={"token_level_rewards": scores, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )
    return data, keys


def _v1_step():
    """verl's v1 advantage step as its trainer calls it, after ``register`` (the Ray setup hook)."""
    register()
    import verl.trainer.ppo.v1.trainer_base as trainer_base

    register()  # rebinds the trainer's own name now that it is imported
    return trainer_base.compute_advantage_for_multi_trajectories


def test_verls_v1_step_gives_every_segment_its_episodes_advantage_counted_once():
    from verl.trainer.config import AlgoConfig

    groups = {0: [2.5, 1.0, None, 0.5], 1: [1.5, 0.0, 2.0]}
    episodes = graded_segmented(groups)
    assert all(e.segmented for e in episodes)
    data, keys = _v1_batch(episodes)
    step = _v1_step()
    assert getattr(step, "agentrl_per_episode", False)
    got = step(data, keys, ESTIMATOR, config=AlgoConfig())
    adv, mask = got.batch["advantages"], got.batch["response_mask"].bool()
    assert torch.equal(got.batch["returns"], adv)
    # the same episodes, one output each (their last segment), through verl's unwrapped step: what
    # each episode gets when it is counted once
    last = [keys.index(f"{e.trajectory.task_id}_{s}_{len(e.records) - 1}") for s, e in enumerate(episodes)]
    once = data.select_idxs(last)
    ref = step.__wrapped__(once, [keys[i] for i in last], ESTIMATOR, config=AlgoConfig())
    native = native_grpo(episodes)
    row = 0
    for s, e in enumerate(episodes):
        r = ref.batch["advantages"][s][ref.batch["response_mask"][s].bool()]
        values = set()
        for _ in e.records:
            values |= {round(float(a), 6) for a in adv[row][mask[row]]}
            row += 1
        if e.reward is None:  # no policy token, no advantage, outside the baseline
            assert not values and not r.numel()
            continue
        assert len(values) == 1  # identical for all segments of the episode
        v = values.pop()
        assert v == pytest.approx(float(r[0]), abs=1e-5)
        assert v == pytest.approx(native[e.trajectory.id][1], abs=1e-5)
    assert len({round(v[1], 4) for v in native.values()}) > 3  # rewards vary within the groups
    # verl's step as it was would have counted each episode once per segment
    assert per_episode_advantage(step) is step  # register is idempotent
    naive = step.__wrapped__(_v1_batch(episodes)[0], keys, ESTIMATOR, config=AlgoConfig())
    assert not torch.allclose(naive.batch["advantages"], adv, atol=1e-4)


def test_one_output_per_session_goes_through_verls_step_unchanged():
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage

    episodes = graded_episodes()
    data, keys = _v1_batch(episodes)
    step = _v1_step()
    got = step(data, keys, ESTIMATOR, config=AlgoConfig())
    want = compute_advantage(_v1_batch(episodes)[0], ESTIMATOR, config=AlgoConfig())
    assert torch.equal(got.batch["advantages"], want.batch["advantages"])
    # another estimator, segmented or not: verl's step unchanged
    seg, seg_keys = _v1_batch(graded_segmented({0: [1.0, 0.0]}))
    got = step(seg, seg_keys, "grpo", config=AlgoConfig())
    want = step.__wrapped__(
        _v1_batch(graded_segmented({0: [1.0, 0.0]}))[0], seg_keys, "grpo", config=AlgoConfig()
    )
    assert torch.equal(got.batch["advantages"], want.batch["advantages"])
