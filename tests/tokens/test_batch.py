"""collate and pack: shapes, padding values, position ids; logits under left padding and packing
equal the unpadded rows' on a tiny randomly initialised model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.tokens import block_causal_mask, collate, pack, token_logprobs
from tests.tokens.conftest import cached_expander, cached_tokenizer
from tests.tokens.helpers import enc, sampled, tid, traj
from tests.tokens.model import tiny_model

SYS = {"role": "system", "content": "s"}
USER = {"role": "user", "content": "Question?"}


def rows():  # type: ignore[no-untyped-def]
    tok = cached_tokenizer("chatml")
    exp = cached_expander("chatml")
    end = tid(tok, "<|im_end|>")
    a = exp.expand(traj(SYS, USER, sampled([*enc(tok, "Short."), end]), id="a", reward=1.0))
    b = exp.expand(
        traj(
            SYS,
            USER,
            sampled([*enc(tok, "Search."), end]),
            {"role": "tool", "tool_call_id": "c", "content": "result " * 5},
            sampled([*enc(tok, "A longer final answer."), end]),
            id="b",
            reward=-1.0,
        )
    )
    return a, b


def test_collate_right_and_left() -> None:
    a, b = rows()
    out = collate([a, b], pad_to_multiple_of=8, pad_token_id=5)
    T = out["input_ids"].shape[1]
    assert T % 8 == 0 and len(b) <= T
    assert set(out) == {
        "input_ids",
        "attention_mask",
        "position_ids",
        "loss_mask",
        "old_logprobs",
        "token_level_scores",
        "turn_ids",
        "prompt_len",
    }
    assert out["input_ids"].dtype == torch.int64 and out["old_logprobs"].dtype == torch.float32
    assert out["input_ids"][0, len(a) :].eq(5).all() and out["attention_mask"][0, len(a) :].eq(0).all()
    assert out["turn_ids"][0, len(a) :].eq(-1).all() and out["loss_mask"][0, len(a) :].eq(0).all()
    assert out["prompt_len"].tolist() == [a.prompt_len, b.prompt_len]
    left = collate([a, b], padding_side="left")
    n = left["input_ids"].shape[1] - len(a)
    assert left["position_ids"][0, n:].tolist() == list(range(len(a)))
    assert left["input_ids"][0, n:].tolist() == a.input_ids.tolist()
    assert left["token_level_scores"][0].sum().item() == pytest.approx(1.0)


def test_pack_restarts_positions_and_rejects_long_rows() -> None:
    a, b = rows()
    out = pack([a, b, a], max_tokens=len(a) + len(b))
    assert out["input_ids"].shape == (2, len(a) + len(b))
    seq = out["sequence_ids"]
    line = next(i for i in range(2) if (seq[i] == 1).any())
    pos = out["position_ids"][line]
    starts = [int(i) for i in np.flatnonzero(pos.numpy() == 0) if seq[line, i] >= 0]
    assert len(starts) == 2  # b and one a share a line; positions restart at each
    assert out["loss_mask"].sum().item() == 2 * a.loss_mask.sum() + b.loss_mask.sum()
    assert out["token_level_scores"].sum().item() == pytest.approx(1.0 - 1.0 + 1.0)
    with pytest.raises(ValueError, match="longer than max_tokens"):
        pack([b], max_tokens=len(b) - 1)


def test_left_padding_and_packing_give_the_unpadded_logits() -> None:
    a, b = rows()
    model = tiny_model(len(cached_tokenizer("chatml")))
    with torch.no_grad():
        ref = [model(torch.from_numpy(r.input_ids)[None]).logits[0] for r in (a, b)]
        left = collate([a, b], padding_side="left")
        out = model(
            left["input_ids"], attention_mask=left["attention_mask"], position_ids=left["position_ids"]
        ).logits
        n = out.shape[1] - len(a)
        torch.testing.assert_close(out[0, n:], ref[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out[1], ref[1], atol=1e-5, rtol=1e-5)
        packed = pack([a, b], max_tokens=len(a) + len(b) + 3)
        mask = block_causal_mask(packed["sequence_ids"])
        outp = model(packed["input_ids"], attention_mask=mask, position_ids=packed["position_ids"]).logits[0]
        seq = packed["sequence_ids"][0]
        torch.testing.assert_close(outp[seq == 0], ref[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(outp[seq == 1], ref[1], atol=1e-5, rtol=1e-5)
        # logprobs of a packed line: the first token of each row has no prediction from its own row
        lp = token_logprobs(outp[None], packed["input_ids"])[0]
        assert lp.shape == packed["input_ids"][0].shape
