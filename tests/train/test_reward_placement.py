"""The expander alone places rewards: ``build_batch`` keeps its scores untouched (turn rewards
included), and the native trainer's batch and an engine adapter's record carry the same
token-level scores, position by position, for the same trajectory."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch

from agentrl.env import ResearchEnv
from agentrl.integrations import run_episode, skyrl_generator_output, verl_output_fields
from agentrl.learn.batch import build_batch, normalized_reward, training_reward
from agentrl.tokens import Expander
from agentrl.trajectory import CriterionScore, Message, RewardBreakdown, Trajectory
from tests.integrations.helpers import ENV_CONFIG, OracleEngine, tasks, tokenizer

CPU = torch.device("cpu")
CRITERIA = [CriterionScore(id="a", score=1, weight=1.0), CriterionScore(id="b", score=0, weight=1.5)]


def _traj(i: int, total: float | None, turn_rewards: list[float] | None = None) -> Trajectory:
    tok = tokenizer()
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    turns = ["Searching first.", "Reading the page now.", "Q1 2025 Cloud revenue was $12.3 billion."]
    msgs = [Message(role="user", content="Summarise.")]
    for k, text in enumerate(turns):
        ids = [*tok.encode(text, add_special_tokens=False), stop]
        msgs.append(Message(role="assistant", content=text, token_ids=ids, logprobs=[-0.1] * len(ids)))
        if k < len(turns) - 1:
            msgs.append(Message(role="tool", tool_call_id="c", content="result"))
    reward = None if total is None else RewardBreakdown(total=total, criteria=CRITERIA)
    info = {} if turn_rewards is None else {"turn_rewards": turn_rewards}
    return Trajectory(id=f"t{i}", task_id="task", messages=msgs, reward=reward, info=info)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("max_len", [None, 52])  # 52 cuts inside the second turn
def test_build_batch_keeps_the_expanders_scores(normalize: bool, max_len: int | None) -> None:
    trajs = [
        _traj(0, 1.0, [0.25, -0.5, 0.125]),
        _traj(1, None, [1.0, 1.0, 1.0]),  # unscored: dropped, its turn rewards with it
        _traj(2, 2.5),
        _traj(3, 0.0, [0.0, 0.75, 0.0]),
    ]
    exp = Expander(tokenizer(), max_len=max_len)
    keep, batch, stats = build_batch(trajs, exp, normalize=normalize, pad_id=0, device=CPU)
    assert [t.id for t in keep] == ["t0", "t2", "t3"] and stats["train/dropped_judge_error"] == 1.0
    scores = batch["token_level_scores"]
    for i, t in enumerate(keep):
        row = exp.expand(t, reward=training_reward(t, normalize))
        n = len(row)
        assert scores[i, :n].tolist() == row.token_level_scores.tolist()
        assert not scores[i, n:].any()
        # Independently of the expander: the reward, and each turn reward, on its last policy token.
        expected = np.zeros(n, dtype=np.float32)
        mask = row.loss_mask == 1
        for k, r in enumerate(t.info.get("turn_rewards", [])):
            where = np.flatnonzero(mask & (row.turn_ids == k))
            if where.size:
                expected[where[-1]] += r
        expected[np.flatnonzero(mask)[-1]] += normalized_reward(t) if normalize else t.reward.total
        assert scores[i, :n].tolist() == pytest.approx(expected.tolist())
    # Turn rewards are there: the reward alone would be one non-zero position.
    assert int((scores[0] != 0).sum()) == (3 if max_len is None else 2)
    if max_len is not None:  # the cut really happened, inside a policy turn
        assert batch["loss_mask"].shape[1] == max_len and batch["loss_mask"][:, max_len - 1].all()


class _TurnRewardEnv(ResearchEnv):
    """The env, with a reward per assistant turn recorded in the trajectory's ``info``."""

    def trajectory(self, id: str | None = None, **kwargs: Any) -> Trajectory:
        t = super().trajectory(id=id, **kwargs)
        n = sum(1 for m in t.messages if m.role == "assistant")
        t.info["turn_rewards"] = [0.125 * (k + 1) - 0.3 for k in range(n)]
        return t


@pytest.mark.parametrize("normalize", [True, False])
def test_the_native_batch_and_the_adapters_place_the_same_scores(normalize: bool) -> None:
    task = tasks()[0]
    ep = asyncio.run(
        run_episode(
            _TurnRewardEnv(ENV_CONFIG),
            Expander(tokenizer()),
            OracleEngine(tasks()).generate,
            task=task,
            seed=7,
            episode_id=f"{task.id}#0",
            max_new_tokens=256,
            max_completion_tokens=4096,
            normalize=normalize,
        )
    )
    traj = ep.trajectory
    assert len(traj.info["turn_rewards"]) == 3 and traj.reward is not None and traj.reward.total
    # The adapters' views of the scores: the record, verl's extra field, SkyRL's per-token rewards.
    rec = ep.record
    adapter = rec.token_level_scores
    assert verl_output_fields(ep)["extra_fields"]["agentrl_token_level_scores"] == adapter
    assert skyrl_generator_output([ep])["rewards"] == [adapter]
    # The native trainer's batch, from the same trajectory, with the same ``normalize``.
    keep, batch, _ = build_batch([traj], Expander(tokenizer()), normalize=normalize, pad_id=0, device=CPU)
    assert keep == [traj]
    P, C = len(rec.prompt_ids), len(adapter)
    native = batch["token_level_scores"][0]
    assert batch["input_ids"][0, :P].tolist() == rec.prompt_ids
    assert batch["input_ids"][0, P : P + C].tolist() == rec.completion_ids
    assert native[P : P + C].tolist() == adapter
    assert not native[:P].any() and not native[P + C :].any()
    # Each turn reward shows up, on three distinct positions, plus the trajectory reward.
    assert np.count_nonzero(adapter) == 3
    reward = normalized_reward(traj) if normalize else traj.reward.total
    assert (reward == traj.reward.total) == (not normalize)  # a weighted-sum rubric: they differ
    assert sum(adapter) == pytest.approx(reward + sum(traj.info["turn_rewards"]))
