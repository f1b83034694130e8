"""The engine-neutral record: an expander row split at the first generated token, fields aligned."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentrl.tokens import Expander, TokenTrajectory, token_trajectory
from agentrl.trajectory import Message
from tests.tokens.fixtures import make_tokenizer_cached
from tests.tokens.helpers import enc, sampled, tid, traj


@pytest.fixture(scope="module")
def exp() -> Expander:
    return Expander(make_tokenizer_cached("chatml"))


def _two_turns(exp: Expander, reward: float | None = 2.0, known_second: bool = True):
    tok = exp.tokenizer
    stop = tid(tok, "<|im_end|>")
    first = sampled([*enc(tok, "look it up"), stop])
    second = sampled([*enc(tok, "the answer"), stop])
    if not known_second:
        second = second.model_copy(update={"logprobs": None})
    return traj(
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "question"},
        first,
        {"role": "tool", "content": "result text", "tool_call_id": "c1"},
        second,
        reward=reward,
        info={"tool_calls": 1, "format_errors": 0, "terminated": True},
    )


def test_record_splits_the_row_at_the_first_generated_token(exp):
    t = _two_turns(exp)
    row = exp.expand(t)
    rec = token_trajectory(row, t)
    P = row.prompt_len
    assert rec.prompt_ids == row.input_ids[:P].tolist()
    assert rec.input_ids == row.input_ids.tolist()
    assert rec.prompt_ids == exp.generation_prompt_ids(t.messages[:2])
    first, second = t.messages[2], t.messages[4]
    # The completion begins with the first turn exactly as sampled, and the policy tokens are exactly the two turns.
    assert rec.completion_ids[: len(first.token_ids)] == first.token_ids
    on = [i for i, m in enumerate(rec.loss_mask) if m]
    assert [rec.completion_ids[i] for i in on] == first.token_ids + second.token_ids
    assert [rec.rollout_logprobs[i] for i in on] == pytest.approx(first.logprobs + second.logprobs)
    off = [i for i, m in enumerate(rec.loss_mask) if not m]
    assert off and all(rec.rollout_logprobs[i] == 0.0 for i in off)  # observation tokens
    assert all(rec.turn_ids[i] == -1 for i in off)
    assert rec.logprobs_known == rec.loss_mask
    assert rec.reward == 2.0 and rec.num_turns == 2 and not rec.truncated
    assert sum(rec.token_level_scores) == pytest.approx(2.0) and rec.token_level_scores[on[-1]] == 2.0
    assert rec.metrics["env/tool_calls"] == 1.0 and rec.metrics["env/terminated"] == 1.0
    assert rec.metrics["policy_tokens"] == len(on)
    assert json.loads(json.dumps(rec.to_dict()))["completion_ids"] == rec.completion_ids


def test_unknown_logprobs_are_zero_and_flagged_and_reward_can_be_overridden(exp):
    t = _two_turns(exp, reward=None, known_second=False)
    row = exp.expand(t)
    rec = token_trajectory(row, t)
    assert rec.reward is None
    second = [i for i, k in enumerate(rec.turn_ids) if k == 1]
    assert all(rec.rollout_logprobs[i] == 0.0 and rec.logprobs_known[i] == 0 for i in second)
    assert token_trajectory(row, t, reward=0.5).reward == 0.5
    # Without the trajectory, turns are counted from the row.
    assert token_trajectory(row).num_turns == 2


def test_misaligned_lists_are_refused():
    with pytest.raises(ValueError, match="loss_mask"):
        TokenTrajectory("x", [1], [2, 3], [1], [0.0, 0.0], [1, 1], [0.0, 0.0], [0, 0], None, 1)


def test_truncated_row_stays_aligned(exp):
    t = _two_turns(exp)
    full = exp.expand(t)
    cut = Expander(exp.tokenizer, max_len=len(full) - 3).expand(t)
    rec = token_trajectory(cut, t)
    assert rec.truncated and len(rec.completion_ids) == len(cut) - cut.prompt_len
    assert np.array_equal(rec.input_ids, cut.input_ids)
    assert isinstance(t.messages[2], Message)
