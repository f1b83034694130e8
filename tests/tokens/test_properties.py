"""Property tests (hypothesis) for the expander and its masks, over random conversations in the
three template families: random turns, tool calls, tool runs, user follow-ups, reasoning, sampled
ids canonical or re-split, turns without ids, stop strings, length cuts and max_len cuts."""

from __future__ import annotations

import json
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.trajectory import Message, Trajectory
from tests.tokens.conftest import cached_expander
from tests.tokens.fixtures import _WORDS
from tests.tokens.helpers import canonical_turn, enc

PIECES = [*_WORDS, "é", "東京", "🙂", "42", ",", ".", "(x)", "naïve"]
text = st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).map(" ".join)
# Built outside the strategies (hypothesis forbids global randomness inside them).
for _f in ("chatml", "llama3", "glm"):
    cached_expander(_f), cached_expander(_f, "strict")

# TOKENS_HYPOTHESIS_EXAMPLES=400 for a deeper run; the default keeps the suite fast.
SETTINGS = settings(
    max_examples=int(os.environ.get("TOKENS_HYPOTHESIS_EXAMPLES", "35")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def conversations(draw):  # type: ignore[no-untyped-def]
    family = draw(st.sampled_from(["chatml", "llama3", "glm"]))
    exp = cached_expander(family)
    tok = exp.tokenizer
    msgs: list[Message] = []
    if draw(st.booleans()):
        msgs.append(Message(role="system", content=draw(text)))
    msgs.append(Message(role="user", content=draw(text)))
    n_turns = draw(st.integers(1, 4))
    modes: list[str] = []
    for k in range(n_turns):
        n_calls = draw(st.integers(0, 2))
        calls = [
            {
                "id": f"c{k}_{j}",
                "type": "function",
                "function": {
                    "name": "search",
                    "arguments": json.dumps({"query": draw(text)}, ensure_ascii=False),
                },
            }
            for j in range(n_calls)
        ]
        reasoning = draw(text) if family == "chatml" and draw(st.booleans()) else None
        m = Message.model_validate(
            {
                "role": "assistant",
                "content": "" if calls and draw(st.booleans()) else draw(text),
                "tool_calls": calls or None,
                "reasoning_content": reasoning,
            }
        )
        last = k == n_turns - 1
        mode = draw(
            st.sampled_from(["canonical", "resplit", "text", "no_stop"] + (["length"] if last else []))
        )
        modes.append(mode)
        if mode != "text":
            m = canonical_turn(exp, m)
            ids = list(m.token_ids or [])
            if mode == "resplit" and len(ids) > 1:
                body = tok.decode(ids[:-1] if ids[-1] in exp.stop_ids else ids)
                cut = draw(st.integers(1, max(1, len(body) - 1)))
                ids = (
                    enc(tok, body[:cut])
                    + enc(tok, body[cut:])
                    + ([ids[-1]] if ids[-1] in exp.stop_ids else [])
                )
            if mode in ("no_stop", "length") and ids and ids[-1] in exp.stop_ids:
                ids = ids[:-1]
            m = m.model_copy(
                update={
                    "token_ids": ids,
                    "logprobs": [-0.5 - 0.01 * i for i in range(len(ids))],
                    "finish_reason": "length" if mode == "length" else "stop",
                }
            )
        msgs.append(m)
        if calls:
            msgs += [Message(role="tool", tool_call_id=c["id"], content=draw(text)) for c in calls]
        elif not last and draw(st.booleans()):
            msgs.append(Message(role="user", content=draw(text)))
    reward = draw(st.sampled_from([None, 1.0, -0.5]))
    t = Trajectory(id="p", task_id="p", messages=msgs, reward=None if reward is None else {"total": reward})
    return family, t, modes


@SETTINGS
@given(conversations())
def test_sampled_ids_are_kept_and_masks_are_exact(case) -> None:  # type: ignore[no-untyped-def]
    family, t, modes = case
    exp = cached_expander(family)
    row = exp.expand(t)
    row.check_aligned()
    asst = [m for m in t.messages if m.role == "assistant"]
    assert row.loss_mask[: row.prompt_len].sum() == 0
    for k, m in enumerate(asst):
        got = row.input_ids[(row.turn_ids == k) & (row.loss_mask == 1)].tolist()
        if m.token_ids is not None:
            span = np.flatnonzero(row.turn_ids == k)
            assert got == m.token_ids, f"turn {k} ({modes[k]})"
            assert (np.diff(span) == 1).all()  # one contiguous run
            assert row.old_logprobs[span].tolist() == np.float32(m.logprobs).tolist()
        else:
            assert k in row.retokenized_turns and not row.old_logprobs[row.turn_ids == k].any()
            # a turn rebuilt from text trains what the model would have written, stop token included
            canon = canonical_turn(exp, m).token_ids or []
            assert got[: len(canon)] == canon
            assert len(got) - len(canon) <= 1 and all(i in exp.stop_ids for i in got[len(canon) :])
            i = [j for j, x in enumerate(t.messages) if x.role == "assistant"][k]
            nxt = t.messages[i + 1] if i + 1 < len(t.messages) else None
            if family == "glm" and nxt is not None and nxt.role != "assistant":
                # The next role header is its stop token. (GLM has no way to end a turn and open
                # another assistant turn: <|assistant|> is not a stop token, so nothing is added.)
                assert len(got) == len(canon) + 1
        if m.finish_reason == "length":
            assert row.truncated and row.segments[-1].kind == "sampled"
    # every loss token belongs to a turn; nothing outside turns is trained or has a logprob
    assert (row.turn_ids[row.loss_mask == 1] >= 0).all()
    assert not row.old_logprobs[row.loss_mask == 0].any()
    n_loss = sum(len(m.token_ids) for m in asst if m.token_ids is not None)
    assert row.loss_mask.sum() >= n_loss
    # the reward sits on the last trained token only
    nz = np.flatnonzero(row.token_level_scores)
    if t.reward is None or t.reward.total == 0:
        assert nz.size == 0 and (row.scored is False or t.reward is not None)
    else:
        assert nz.tolist() == [int(np.flatnonzero(row.loss_mask)[-1])]
        assert row.token_level_scores.sum() == np.float32(t.reward.total)


@SETTINGS
@given(conversations())
def test_expansion_matches_a_full_render(case) -> None:  # type: ignore[no-untyped-def]
    """With sampled ids that spell what the template writes, the strict check passes: the only
    differences from one encode of the full render are re-split sampled text."""
    family, t, _ = case
    exp = cached_expander(family, "strict")
    exp.expand(t)


@SETTINGS
@given(conversations(), st.integers(1, 400))
def test_max_len_cut_is_a_prefix(case, max_len: int) -> None:  # type: ignore[no-untyped-def]
    from agentrl.tokens import Expander

    family, t, _ = case
    full = cached_expander(family).expand(t)
    exp = _cut_expander(family, max_len)
    row = exp.expand(t)
    row.check_aligned()
    n = min(max_len, len(full))
    assert len(row) == n and row.truncated == (full.truncated or len(full) > max_len)
    for name in ("input_ids", "loss_mask", "old_logprobs", "turn_ids", "position_ids", "attention_mask"):
        assert getattr(row, name).tolist() == getattr(full, name)[:n].tolist(), name
    if row.scored:
        assert np.flatnonzero(row.token_level_scores).tolist() == [int(np.flatnonzero(row.loss_mask)[-1])]
    assert isinstance(exp, Expander)


_CUT: dict = {}


def _cut_expander(family: str, max_len: int):  # type: ignore[no-untyped-def]
    from agentrl.tokens import Expander

    base = cached_expander(family)
    if family not in _CUT:
        _CUT[family] = Expander(base.tokenizer)
    e = _CUT[family]
    e.max_len = max_len
    return e
