"""The off-by-one check: log p(token t) comes from logits[t-1].

A tiny random model samples two turns token by token (recording each token's log-probability, as a
rollout engine would), with a tool observation between them built by hand from the template
text. The expander's row, run through the same model, must give back the recorded logprobs on
every ``loss_mask = 1`` token, and must not with the logits left unshifted.
"""

from __future__ import annotations

import torch

from agentrl.tokens import collate, token_logprobs
from tests.tokens.conftest import cached_expander, cached_tokenizer
from tests.tokens.helpers import enc, tid, traj
from tests.tokens.model import tiny_model


def sample_turn(
    model, context: list[int], n: int, stop: int, gen: torch.Generator
) -> tuple[list[int], list[float]]:  # type: ignore[no-untyped-def]
    """Sample ``n`` tokens, then force ``stop`` (as if the policy chose it); record log-probs."""
    ids: list[int] = []
    lps: list[float] = []
    with torch.no_grad():
        for k in range(n + 1):
            logits = model(torch.tensor([context + ids])).logits[0, -1]
            logp = torch.log_softmax(logits.float(), -1)
            t = stop if k == n else int(torch.multinomial(logp.exp(), 1, generator=gen))
            ids.append(t)
            lps.append(float(logp[t]))
    return ids, lps


def test_old_logprobs_align_with_logits_shifted_by_one() -> None:
    tok = cached_tokenizer("chatml")
    exp = cached_expander("chatml")
    model = tiny_model(len(tok))
    gen = torch.Generator().manual_seed(1)
    end = tid(tok, "<|im_end|>")
    prompt = enc(
        tok, "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nFind it.<|im_end|>\n<|im_start|>assistant\n"
    )
    ids1, lp1 = sample_turn(model, prompt, 6, end, gen)
    obs = enc(
        tok,
        "\n<|im_start|>user\n<tool_response>\nresult text\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    )
    ids2, lp2 = sample_turn(model, prompt + ids1 + obs, 5, end, gen)
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "Find it."},
        {"role": "assistant", "content": tok.decode(ids1[:-1]), "token_ids": ids1, "logprobs": lp1},
        {"role": "tool", "tool_call_id": "c", "content": "result text"},
        {"role": "assistant", "content": tok.decode(ids2[:-1]), "token_ids": ids2, "logprobs": lp2},
    ]
    row = exp.expand(traj(*msgs))
    assert row.input_ids.tolist()[: len(prompt + ids1 + obs + ids2)] == prompt + ids1 + obs + ids2
    short = exp.expand(traj(*msgs[:3], id="short"))
    batch = collate([row, short], padding_side="left")  # left padding must not move anything either
    with torch.no_grad():
        logits = model(
            batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits
    new = token_logprobs(logits, batch["input_ids"])
    mask = batch["loss_mask"].bool()
    assert int(mask[0].sum()) == len(ids1) + len(ids2)
    torch.testing.assert_close(new[mask], batch["old_logprobs"][mask], atol=1e-4, rtol=0)
    # the classic bug: taking log p(token t) from logits[t] instead of logits[t-1]
    wrong = torch.log_softmax(logits.float(), -1).gather(-1, batch["input_ids"][..., None]).squeeze(-1)
    assert (wrong[mask] - batch["old_logprobs"][mask]).abs().max() > 0.1


def test_a_one_token_row_keeps_its_column() -> None:
    """Rows of one token (FSDP's padding micro-batches) get one log-prob, 0, not an empty row."""
    from agentrl.learn.forward import forward_logprobs

    out = token_logprobs(torch.randn(2, 1, 7), torch.zeros(2, 1, dtype=torch.long))
    assert out.shape == (2, 1) and not out.any()
    model = tiny_model(7)
    one = {k: torch.ones(2, 1, dtype=torch.long) for k in ("input_ids", "attention_mask", "loss_mask")}
    one["position_ids"] = torch.zeros(2, 1, dtype=torch.long)
    for pack in (False, True):
        lp, ent = forward_logprobs(model, one, with_entropy=True, pack=pack)
        assert lp.shape == ent.shape == (2, 1), pack
