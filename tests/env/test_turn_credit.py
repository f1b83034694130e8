"""``turn_credit: evidence`` end to end on the long-horizon suite: the oracle's reading turns are
credited, the expander moves the credit from the outcome onto them (every row keeps its total, with
and without context rewrites), GRPO is unchanged and per-token estimators see it, re-scoring
recomputes it, and with the option off nothing changes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

from agentrl.algos import gae
from agentrl.env import ResearchEnv
from agentrl.judge import JudgeConfig, normalized_reward, parse_rubric
from agentrl.judge.evidence import prints_figure
from agentrl.judge.rubric import FigureGrader
from agentrl.learn.advantages import compute_advantages
from agentrl.learn.algorithm import AlgorithmConfig
from agentrl.learn.batch import build_batch
from agentrl.policy import OraclePolicy
from agentrl.replay.rescore import rescore
from agentrl.rollout.context import ContextPolicy
from agentrl.rollout.episode import EpisodeSpec, Generation, Limits, run_episode
from agentrl.rollout.runner import run_policy_episode
from agentrl.tokens import Expander, expand_segments
from agentrl.trajectory import Trajectory
from agentrl.trajectory.context import segments
from tests.tokens.fixtures import make_tokenizer_cached

SUITE = str(Path(__file__).resolve().parents[2] / "examples" / "long-horizon-env")
CPU = torch.device("cpu")


def _oracle(turn_credit: str | None) -> list[Trajectory]:
    cfg = {"suite": SUITE} if turn_credit is None else {"suite": SUITE, "turn_credit": turn_credit}
    env = ResearchEnv(cfg)

    async def run() -> list[Trajectory]:
        tasks = [t for t in env.tasks if t.ground_truth.get("steps")]
        return [await run_policy_episode(env, OraclePolicy(0.0), t, 0, 0) for t in tasks]

    return asyncio.run(run())


@pytest.fixture(scope="module")
def episodes() -> tuple[list[Trajectory], list[Trajectory]]:
    """The oracle on every multi-source task, with the credit on and with the option left out."""
    return _oracle("evidence"), _oracle(None)


@pytest.fixture(scope="module")
def expander() -> Expander:
    return Expander(make_tokenizer_cached("chatml"), max_len=8192)


def _opened_at(traj: Trajectory) -> dict[str, int]:
    """The URL of each ``open_url`` call → the assistant turn (0-based) that made it first."""
    out: dict[str, int] = {}
    turns = [m for m in traj.messages if m.role == "assistant"]
    for k, m in enumerate(turns):
        for c in m.tool_calls or []:
            if c.function.name == "open_url":
                out.setdefault(c.function.parsed_arguments()["url"], k)
    return out


def _want_credit(traj: Trajectory, env: ResearchEnv) -> list[float]:
    """The credit the oracle should get, from the task's ground truth: each figure's weight over
    the positive weight, on the turn that opened its official release."""
    task = next(t for t in env.tasks if t.id == traj.task_id)
    rubric = parse_rubric(traj.info["rubric"])
    figures = [c for c in rubric.criteria if isinstance(c.grader, FigureGrader)]
    steps = task.ground_truth["steps"]
    assert len(figures) == len(steps) >= 2
    positive = sum(c.weight for c in rubric.criteria if c.weight > 0)
    opened = _opened_at(traj)
    want = [0.0] * sum(1 for m in traj.messages if m.role == "assistant")
    for c in figures:  # each figure is the official figure of one step (a correction: the filing's)
        (step,) = [s for s in steps if prints_figure(c.grader, s["official"]["figure"])]
        want[opened[step["official"]["url"]]] += c.weight / positive
    return want


def test_the_oracle_is_credited_on_the_turns_that_opened_each_figures_release(episodes):
    on, off = episodes
    env = ResearchEnv({"suite": SUITE})
    assert len(on) == len(off) >= 9
    for t, plain in zip(on, off, strict=True):
        assert normalized_reward(t) >= 0.999
        assert t.info["turn_credit"] == pytest.approx(_want_credit(t, env)), t.task_id
        assert sum(t.info["turn_credit"]) == pytest.approx(0.2 / 2.5)  # the figures' share
        # the option changes nothing else: same episode, same reward, and no turn rewards
        assert t.reward == plain.reward and t.messages == plain.messages
        assert "turn_credit" not in plain.info and "turn_rewards" not in plain.info
        assert "turn_rewards" not in t.info


def _last_token(row, turn: int) -> int:
    return int(np.flatnonzero((row.turn_ids == turn) & (row.loss_mask == 1))[-1])


def test_the_expander_moves_the_credit_from_the_outcome_onto_the_reading_turns(episodes, expander):
    on, off = episodes
    for t, plain in zip(on, off, strict=True):
        reward = normalized_reward(t)
        (row,) = expand_segments(expander, t, reward=reward)
        (base,) = expand_segments(expander, plain, reward=reward)
        assert np.array_equal(row.input_ids, base.input_ids) and np.array_equal(row.loss_mask, base.loss_mask)
        credit = t.info["turn_credit"]
        want = base.token_level_scores.astype(np.float64).copy()  # the outcome on the last token
        for k, c in enumerate(credit):
            want[_last_token(row, k)] += c
        want[_last_token(row, len(credit) - 1)] -= sum(credit)
        assert row.token_level_scores == pytest.approx(want, abs=1e-6)
        assert np.count_nonzero(row.token_level_scores) == 1 + sum(c > 0 for c in credit)
        # the invariant: the credit plus what is left of the outcome is the episode's reward
        assert float(row.token_level_scores.sum()) == pytest.approx(reward, abs=1e-6)
        assert float(base.token_level_scores.sum()) == pytest.approx(reward, abs=1e-6)


def test_grpo_is_unchanged_and_the_reward_to_go_sees_the_credit(episodes, expander):
    on, off = episodes
    batches = []
    for trajs in (on, off):
        _, batch, _ = build_batch(trajs, expander, normalize=True, pad_id=0, device=CPU)
        batches.append(batch)
    got, base = batches
    groups = [t.info["family"] for t in on]  # groups with different rewards: non-zero advantages
    for name in ("grpo", "rloo"):
        a, b = dict(got), dict(base)
        compute_advantages(a, AlgorithmConfig(name=name), groups)
        compute_advantages(b, AlgorithmConfig(name=name), groups)
        assert torch.allclose(a["advantages"], b["advantages"], atol=1e-6), name
    # γ = λ = 1 and V = 0: the advantage is the reward to go. Up to the first reading turn it is the
    # episode's reward, as without credit; after the last, the reward less what the reading earned.
    mask = got["loss_mask"]
    zeros = torch.zeros_like(mask, dtype=torch.float32)
    adv, _ = gae(got["token_level_scores"].float(), zeros, mask, 1.0, 1.0)
    ref, _ = gae(base["token_level_scores"].float(), zeros, mask, 1.0, 1.0)
    for i, t in enumerate(on):
        credit = t.info["turn_credit"]
        turns = got["turn_ids"][i]
        first = min(k for k, c in enumerate(credit) if c)
        last = max(k for k, c in enumerate(credit) if c)
        before = (turns <= first) & (mask[i] == 1)
        after = (turns > last) & (mask[i] == 1)
        assert torch.allclose(adv[i][before], ref[i][before], atol=1e-6)
        assert torch.allclose(adv[i][after], ref[i][after] - sum(credit), atol=1e-6)
    assert not torch.allclose(adv, ref)


def test_rescoring_recomputes_the_credit_and_never_keeps_a_stale_one(episodes):
    on, _ = episodes
    again, _ = rescore(on, None, JudgeConfig())
    assert [t.info["turn_credit"] for t in again] == [t.info["turn_credit"] for t in on]
    # a rubric that no longer pays the figures: the credit goes with them
    rubric = parse_rubric(on[0].info["rubric"])
    plain = rubric.model_copy(
        update={"criteria": [c for c in rubric.criteria if not isinstance(c.grader, FigureGrader)]}
    )
    (changed,), _ = rescore(on[:1], plain, JudgeConfig())
    assert changed.reward is not None and changed.reward.status == "ok"
    assert changed.info["turn_credit"] == [0.0] * len(on[0].info["turn_credit"])


def _segmented(strategy: str, max_len: int = 2048, new: int = 256) -> tuple[Expander, list[Trajectory]]:
    """The oracle in token mode with context management: episodes of several context segments."""
    tok = make_tokenizer_cached("chatml")
    exp = Expander(tok, max_len=max_len)
    stop = int(tok.convert_tokens_to_ids("<|im_end|>"))
    env = ResearchEnv({"suite": SUITE, "turn_credit": "evidence"})
    oracle = OraclePolicy(0.0)

    async def gen(req):  # type: ignore[no-untyped-def]
        msg = await oracle.act(req.messages, req.context())
        ids = [*tok.encode(msg.text, add_special_tokens=False), stop][: req.max_tokens]
        return Generation(ids, [-0.01] * len(ids))

    async def run() -> list[Trajectory]:
        limits = Limits(max_new_tokens=new, max_len=max_len, context=ContextPolicy(strategy))
        tasks = [t for t in env.tasks if t.ground_truth.get("steps")]
        return [
            (await run_episode(env, EpisodeSpec(t.id, t, 0), gen, expander=exp, limits=limits)).trajectory
            for t in tasks
        ]

    return exp, asyncio.run(run())


@pytest.mark.parametrize("strategy", ["drop_observations", "summarize"])
def test_under_context_rewrites_each_turns_credit_stays_in_its_segments_row_and_rows_keep_their_total(
    strategy,
):
    exp, trajs = _segmented(strategy)
    assert max(len(segments(t)) for t in trajs) >= 2
    for t in trajs:
        reward = normalized_reward(t)
        credit = t.info["turn_credit"]
        assert sum(credit) == pytest.approx(0.08)
        rows = expand_segments(exp, t, reward=reward)
        trained = [0] * len(credit)  # the rows that train each turn
        for seg, row in zip(segments(t), rows, strict=True):
            # each row: its own turns' credit on their last tokens, the outcome less it at its end
            # the row's turns are those of its view: after a summary, episode turn = view turn +
            # offset, and the notes the segment wrote (its last view turn) are no episode turn
            offset = seg.context.turn_offset(t.messages)
            views = sorted({int(v) for v in row.turn_ids[row.loss_mask == 1]})
            notes = views[-1] if seg.closing is not None else None
            own = {v: v + offset for v in views if v != notes}
            assert all(k >= seg.first_turn for k in own.values())  # (a segment may write notes only)
            want = np.zeros(len(row), dtype=np.float64)
            for v, k in own.items():
                trained[k] += 1
                want[_last_token(row, v)] += credit[k]
            want[int(np.flatnonzero(row.loss_mask)[-1])] += reward - sum(credit[k] for k in own.values())
            assert row.token_level_scores == pytest.approx(want, abs=1e-6), (t.id, seg.index)
            assert float(row.token_level_scores.sum()) == pytest.approx(reward, abs=1e-6)
        assert trained == [1] * len(credit)  # every turn's credit on one row: never twice, never lost
    # GRPO over episodes sees each episode's reward, as without credit
    _, batch, _ = build_batch(trajs, exp, normalize=True, pad_id=0, device=CPU)
    plain = [
        t.model_copy(update={"info": {k: v for k, v in t.info.items() if k != "turn_credit"}}) for t in trajs
    ]
    _, base, _ = build_batch(plain, exp, normalize=True, pad_id=0, device=CPU)
    groups = [t.info["family"] for t in trajs]
    keep_groups = [groups[e] for e in batch["episode"].tolist()]
    compute_advantages(batch, AlgorithmConfig(name="grpo"), keep_groups)
    compute_advantages(base, AlgorithmConfig(name="grpo"), keep_groups)
    assert torch.allclose(batch["advantages"], base["advantages"], atol=1e-6)


def test_replay_of_stored_trajectories_rebuilds_the_trainers_credited_scores(episodes, expander, tmp_path):
    from agentrl.replay import rebuild_batch, resolve_settings
    from agentrl.train.config import TrainConfig
    from agentrl.trajectory import read_trajectories, write_trajectories

    on, off = episodes
    path = tmp_path / "step_00001.jsonl"
    write_trajectories(path, on)
    stored = list(read_trajectories(path))
    assert [t.info["turn_credit"] for t in stored] == [t.info["turn_credit"] for t in on]
    rebuilt = rebuild_batch(stored, expander, resolve_settings(TrainConfig()), pad_id=0)
    _, want, _ = build_batch(on, expander, normalize=True, pad_id=0, device=CPU)
    _, plain, _ = build_batch(off, expander, normalize=True, pad_id=0, device=CPU)
    assert torch.equal(rebuilt.batch["token_level_scores"], want["token_level_scores"])
    assert not torch.equal(want["token_level_scores"], plain["token_level_scores"])
