"""Where the expander puts rewards: the trajectory reward on the row's last policy token only, each
turn reward on its turn's last policy token, and after a ``max_len`` cut on the last kept ones."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.tokens import Expander
from agentrl.trajectory import RewardBreakdown
from tests.tokens.conftest import cached_expander, cached_tokenizer
from tests.tokens.helpers import enc, sampled, traj

TOOL = {"role": "tool", "tool_call_id": "c", "content": "result text"}


def _three_turns(family: str, **kw):  # type: ignore[no-untyped-def]
    tok = cached_tokenizer(family)
    return traj(
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Question?"},
        sampled(enc(tok, "First look.")),
        TOOL,
        sampled(enc(tok, "Second look, longer.")),
        TOOL,
        sampled(enc(tok, "The answer.")),
        **kw,
    )


def _turn_ends(row) -> list[int]:  # type: ignore[no-untyped-def]
    """The last loss-masked position of each turn present in the row."""
    turns = sorted({int(k) for k in row.turn_ids[row.loss_mask == 1]})
    return [int(np.flatnonzero((row.turn_ids == k) & (row.loss_mask == 1))[-1]) for k in turns]


def test_the_reward_sits_on_the_last_policy_token_only(family: str) -> None:
    exp = cached_expander(family)
    t = _three_turns(family, reward=2.5)
    row = exp.expand(t)
    last = int(np.flatnonzero(row.loss_mask)[-1])
    assert np.flatnonzero(row.token_level_scores).tolist() == [last]
    assert row.token_level_scores[last] == pytest.approx(2.5) and row.scored
    # The value to place can be given (a trainer's normalised score); the place does not move.
    given = exp.expand(t, reward=0.4)
    assert np.flatnonzero(given.token_level_scores).tolist() == [last]
    assert given.token_level_scores[last] == pytest.approx(0.4)
    # An unscored or judge-error trajectory places nothing, whatever value is given.
    for r in (None, RewardBreakdown(total=None, status="judge_error")):
        row = exp.expand(t.model_copy(update={"reward": r}), reward=1.0)
        assert not row.scored and not row.token_level_scores.any()


def test_turn_rewards_sit_on_each_turns_last_policy_token(family: str) -> None:
    exp = cached_expander(family)
    t = _three_turns(family, reward=2.0, info={"turn_rewards": [0.1, -0.2, 0.3]})
    row = exp.expand(t)
    ends = _turn_ends(row)
    assert len(ends) == 3 and ends == sorted(ends)
    assert np.flatnonzero(row.token_level_scores).tolist() == ends
    assert row.token_level_scores[ends].tolist() == pytest.approx([0.1, -0.2, 2.3])
    # Given as an argument, they override the trajectory's own.
    arg = exp.expand(t, [1.0, 0.0, 0.0], reward=0.5)
    assert np.flatnonzero(arg.token_level_scores).tolist() == [ends[0], ends[2]]
    assert arg.token_level_scores[[ends[0], ends[2]]].tolist() == pytest.approx([1.0, 0.5])


@pytest.mark.parametrize("family", ["chatml", "llama3"])
def test_a_cut_row_places_rewards_on_the_last_kept_policy_tokens(family: str) -> None:
    full_row = cached_expander(family).expand(_three_turns(family))
    second = np.flatnonzero((full_row.turn_ids == 1) & (full_row.loss_mask == 1))
    assert second.size >= 3
    cut = int(second[1]) + 1  # two tokens of the second turn survive, the third turn is cut away
    exp = Expander(cached_tokenizer(family), max_len=cut)
    row = exp.expand(_three_turns(family, reward=2.0, info={"turn_rewards": [0.1, 0.2, 0.3]}))
    assert row.truncated and len(row) == cut
    assert np.flatnonzero(row.token_level_scores).tolist() == [int(_turn_ends(full_row)[0]), cut - 1]
    # The kept part of turn 1 carries its turn reward and the trajectory reward; turn 2's is lost.
    assert row.token_level_scores[cut - 1] == pytest.approx(2.2)
    assert row.token_level_scores.sum() == pytest.approx(2.3)
    # A cut that keeps no policy token places nothing.
    none = Expander(cached_tokenizer(family), max_len=row.prompt_len).expand(_three_turns(family))
    assert not none.loss_mask.any() and not none.scored and not none.token_level_scores.any()
