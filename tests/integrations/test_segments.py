"""Episodes whose context was rewritten, through every adapter's mapping (no engine package needed):
each context segment becomes a sample that is exactly its ``expand_segments`` row; SkyRL's
step-wise contract gives every segment its episode's advantage with each episode counted once (a
reference of SkyRL's documented step-wise GRPO, compared with the native trainer's); TRL refuses
them with an error that says what to do. An episode never rewritten maps as before."""

from __future__ import annotations

import asyncio
import statistics

import pytest
import torch

from agentrl.errors import ConfigError
from agentrl.integrations import SegmentedEpisodeError, load_settings
from agentrl.integrations.episode import run_episode
from agentrl.integrations.mapping import (
    skyrl_generator_output,
    trl_rollout_fields,
    verl_output_fields,
    verl_outputs,
)
from agentrl.integrations.settings import expander_for
from agentrl.integrations.trl import make_rollout_func
from agentrl.tokens import segment_row_id
from agentrl.trajectory.context import segments
from tests.integrations.helpers import graded_episodes, native_grpo, tokenizer
from tests.integrations.segmented import (
    COMPLETION,
    SETTINGS,
    ReplayEngine,
    expected_samples,
    graded_segmented,
    segmented_episodes,
    task_ids,
)


def test_an_adapter_run_splits_a_long_episode_into_its_segments_rows():
    cfg = load_settings(SETTINGS)
    engine = ReplayEngine()
    ep = asyncio.run(
        run_episode(
            cfg.make_env(),
            expander_for(tokenizer()),
            engine.generate,
            task=task_ids()[0],
            seed=0,
            episode_id="e",
            max_new_tokens=cfg.max_new_tokens,
            max_completion_tokens=COMPLETION,
            max_len=cfg.max_len,
            context=cfg.context_policy(),
        )
    )
    traj = ep.trajectory
    assert ep.segmented and len(ep.records) == len(segments(traj)) >= 3
    assert all(len(p) + cfg.max_new_tokens <= cfg.max_len for p in engine.prompts)  # every call fits
    want = expected_samples(traj)
    assert len(want) == len(ep.records)
    for k, (rec, (ids, mask, scores)) in enumerate(zip(ep.records, want, strict=True)):
        assert rec.trajectory_id == segment_row_id(traj.id, k)
        assert rec.prompt_ids + rec.completion_ids == ids  # token for token
        assert [0] * len(rec.prompt_ids) + rec.loss_mask == mask
        assert rec.token_level_scores == scores[len(rec.prompt_ids) :]
        assert rec.reward == ep.reward == 1.0 and sum(scores) == 1.0  # the episode's outcome, each row
    # every prompt the engine was fed is a prefix of its segment's row: what was sampled is trained
    for p in engine.prompts:
        assert any(ids[: len(p)] == p and any(mask[len(p) :]) for ids, mask, _ in want)


def test_verl_gets_one_output_per_segment_each_its_row():
    for ep in segmented_episodes():
        outs = verl_outputs(ep)
        want = expected_samples(ep.trajectory)
        assert len(outs) == len(want) == len(ep.records) > 1
        for k, (o, (ids, mask, _)) in enumerate(zip(outs, want, strict=True)):
            assert o["prompt_ids"] + o["response_ids"] == ids
            assert o["response_mask"] == mask[len(o["prompt_ids"]) :]
            assert len(o["response_logprobs"]) == len(o["response_ids"])
            assert o["reward_score"] == ep.reward  # every segment: the episode's outcome
            x = o["extra_fields"]
            assert x["agentrl_trajectory_id"] == segment_row_id(ep.trajectory.id, k)
            assert (x["agentrl_episode_id"], x["agentrl_segment"], x["agentrl_segments"]) == (
                ep.trajectory.id,
                k,
                len(outs),
            )
            assert x["reward_extra_info"] == {}
    # an episode never rewritten: exactly the one output it always was
    for ep in graded_episodes({0: [1.0, None]}):
        assert not ep.segmented and verl_outputs(ep) == [verl_output_fields(ep)]


def _skyrl_stepwise_grpo(out, eps=1e-6):
    """SkyRL's documented step-wise GRPO (``RayPPOTrainer.compute_advantages_and_returns`` with
    ``generator.step_wise_trajectories``): the group statistics use each trajectory's last step only
    (score: the sum of its per-token rewards; groups by ``instance_id``; a group of one: mean 0, std
    1; else the mean and unbiased std), and every step of the trajectory (its steps run up to its
    ``is_last_step``) gets that advantage times its own loss mask."""
    last = out["is_last_step"]
    uids = [t["instance_id"] for t in out["trajectory_ids"]]
    scores = [sum(r) for r in out["rewards"]]
    by: dict[str, list[float]] = {}
    for s, u, e in zip(scores, uids, last, strict=True):
        if e:
            by.setdefault(u, []).append(s)
    stats = {
        u: (0.0, 1.0) if len(v) == 1 else (statistics.mean(v), statistics.stdev(v)) for u, v in by.items()
    }
    adv, pending = [], []
    for i, (s, u, e) in enumerate(zip(scores, uids, last, strict=True)):
        pending.append(i)
        if e:
            a = (s - stats[u][0]) / (stats[u][1] + eps)
            for j in pending:
                adv.append([a * m for m in out["loss_masks"][j]])
            pending = []
    assert not pending, "a trajectory without its last step"
    return adv


def test_skyrl_step_wise_gives_every_segment_its_episodes_advantage_counted_once():
    groups = {0: [2.5, 1.0, 0.5], 1: [1.5, 0.0, 2.0, None]}
    episodes = graded_segmented(groups)
    ids = [{"instance_id": e.trajectory.task_id, "repetition_id": k} for k, e in enumerate(episodes)]
    out = skyrl_generator_output(episodes, ids, step_wise=True)
    n = [len(e.records) for e in episodes]
    assert len(out["response_ids"]) == sum(n) > len(episodes)
    assert out["is_last_step"] == [j == m - 1 for m in n for j in range(m)]
    assert out["trajectory_ids"] == [i for i, m in zip(ids, n, strict=True) for _ in range(m)]
    adv = _skyrl_stepwise_grpo(out)
    native = native_grpo(episodes)  # build_batch + GRPO, grouped by task, over the same trajectories
    failed = {e.trajectory.task_id for e in episodes if e.reward is None}
    row = 0
    for e in episodes:
        want = expected_samples(e.trajectory, normalize=False)
        values = set()
        for ids_, mask, scores in want:
            p = len(out["prompt_token_ids"][row])
            assert out["prompt_token_ids"][row] + out["response_ids"][row] == ids_
            dropped = e.trajectory.task_id in failed  # SkyRL keeps every sample: the group is dropped
            assert out["loss_masks"][row] == ([0] * (len(ids_) - p) if dropped else mask[p:])
            assert out["rewards"][row] == ([0.0] * (len(ids_) - p) if dropped else scores[p:])
            values |= {round(a, 9) for a, m in zip(adv[row], out["loss_masks"][row], strict=True) if m}
            row += 1
        if e.trajectory.task_id in failed:
            assert not values
            continue
        assert len(values) == 1  # identical for all segments of the episode
        assert values.pop() == pytest.approx(native[e.trajectory.id][1], abs=1e-5)
    assert row == len(out["response_ids"])
    assert len({round(v[1], 6) for v in native.values()}) > 2  # rewards vary within the groups
    m = out["rollout_metrics"]
    assert (m["agentrl/excluded"], m["agentrl/dropped_groups"]) == (1.0, 1.0)
    assert m["agentrl/dropped_samples"] == float(sum(n[3:]))


def test_skyrl_without_step_wise_refuses_a_segmented_episode_and_maps_others_as_before():
    with pytest.raises(SegmentedEpisodeError, match="step_wise_trajectories=true"):
        skyrl_generator_output(list(segmented_episodes()))
    plain = graded_episodes()
    ids = [{"instance_id": e.trajectory.task_id, "repetition_id": k} for k, e in enumerate(plain)]
    before = skyrl_generator_output(plain, ids)
    assert "is_last_step" not in before
    step_wise = skyrl_generator_output(plain, ids, step_wise=True)
    assert step_wise.pop("is_last_step") == [True] * len(plain)  # one step per episode
    assert step_wise == before


def test_trl_refuses_segmented_episodes_and_context_management_saying_what_to_do():
    with pytest.raises(SegmentedEpisodeError, match="one completion per prompt"):
        trl_rollout_fields(list(segmented_episodes()))
    with pytest.raises(ConfigError, match=r"context\.strategy=none with TRL"):
        make_rollout_func(SETTINGS, generate_batch=lambda p, m: [], tokenizer=tokenizer())
    plain = graded_episodes({0: [1.0]})
    assert trl_rollout_fields(plain)["completion_ids"] == [plain[0].record.completion_ids]


def test_native_grpo_on_segmented_episodes_is_grpo_over_episodes():
    """The native path the adapters are compared with: one advantage per episode, every row."""
    episodes = graded_segmented({0: [2.5, 1.0, 0.5]})
    native = native_grpo(episodes)
    from agentrl.algos import grpo_advantages

    scores = torch.tensor([e.reward for e in episodes])
    want = grpo_advantages(scores, [0] * len(episodes), torch.ones(len(episodes), 1))[:, 0]
    got = torch.tensor([native[e.trajectory.id][1] for e in episodes])
    assert torch.allclose(got, want, atol=1e-5)


def test_skyrl_step_wise_stop_reasons_follow_each_rows_last_sampled_turn():
    """A summarized episode whose notes were cut at ``max_tokens``: each step's stop reason is how
    its row's last sampled turn finished (the notes closing it, ``length``), not a turn counted in
    the shortened context's numbering."""
    from agentrl.env import ResearchEnv
    from agentrl.integrations.episode import expand_episode
    from agentrl.policy import OraclePolicy
    from agentrl.rollout.context import ContextPolicy
    from agentrl.rollout.episode import EpisodeSpec, Generation, Limits
    from agentrl.rollout.episode import run_episode as loop
    from agentrl.tokens import Expander
    from tests.rollout.test_summarize import SUITE
    from tests.tokens.fixtures import make_tokenizer_cached

    tok = make_tokenizer_cached("chatml")
    exp, stop = Expander(tok, max_len=2048), int(tok.convert_tokens_to_ids("<|im_end|>"))
    env = ResearchEnv({"suite": SUITE})
    task = next(t for t in env.tasks if t.ground_truth.get("steps"))
    oracle = OraclePolicy(0.0)

    async def gen(req):  # type: ignore[no-untyped-def]
        msg = await oracle.act(req.messages, req.context())
        if req.summary:  # notes longer than allowed: cut, no stop token
            return Generation(
                tok.encode(msg.text + " pad" * 400, add_special_tokens=False)[: req.max_tokens], None
            )
        ids = [*tok.encode(msg.text, add_special_tokens=False), stop]
        return Generation(ids, None)

    limits = Limits(256, 2048, context=ContextPolicy("summarize", 1024))
    res = asyncio.run(loop(env, EpisodeSpec("t", task, 0), gen, expander=exp, limits=limits))
    traj = res.trajectory
    ep = expand_episode(traj, exp)
    out = skyrl_generator_output([ep], ["t0"], step_wise=True)
    want = [
        "length"
        if s.closing is not None
        else (next(m for m in reversed(traj.messages) if m.role == "assistant").finish_reason or "stop")
        for s in segments(traj)
    ]
    assert len(want) > 1 and out["stop_reasons"] == want
