"""Batched sampling with a KV cache: what is recorded is exactly what was sampled, and with what
probability; a row's tokens depend only on its prompt and seed."""

import pytest
import torch

from agentrl.algos import logprobs_from_logits
from agentrl.learn.models import build_tiny_model
from agentrl.sampling.generate import _process, sample_batch
from tests.tokens.fixtures import make_tokenizer_cached


@pytest.fixture(scope="module")
def setup():
    tok = make_tokenizer_cached("chatml")
    model = build_tiny_model(len(tok), "tiny:layers=2,hidden=32,heads=2,kv_heads=1", seed=3)
    prompts = [
        tok.encode("hello world this is"),
        tok.encode("a b"),
        tok.encode("results of the quarter were good"),
    ]
    return tok, model, prompts


def _sample(model, prompts, seeds, **kw):
    kw.setdefault("stop_ids", {5})
    kw.setdefault("max_new_tokens", 16)
    return sample_batch(model, prompts, seeds=seeds, pad_id=0, **kw)


def test_rows_do_not_depend_on_the_batch(setup):
    _, model, prompts = setup
    together = _sample(model, prompts, [1, 2, 3])
    alone = [_sample(model, [p], [s])[0] for p, s in zip(prompts, [1, 2, 3], strict=True)]
    assert [s.token_ids for s in together] == [s.token_ids for s in alone]
    assert _sample(model, prompts, [1, 2, 3])[0].token_ids == together[0].token_ids  # seeded
    assert _sample(model, prompts, [9, 2, 3])[0].token_ids != together[0].token_ids


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recorded_logprobs_match_a_full_forward_pass(setup, temperature):
    _, model, prompts = setup
    for p, s in zip(prompts, _sample(model, prompts, [4, 5, 6], temperature=temperature), strict=True):
        ids = torch.tensor([p + s.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits / temperature
        full = logprobs_from_logits(logits[:, :-1], ids[:, 1:])[0, len(p) - 1 :]
        assert torch.allclose(torch.tensor(s.logprobs), full, atol=1e-4)


def test_stop_token_is_kept_and_ends_the_row(setup):
    _, model, prompts = setup
    # Make every token a stop token: each row stops after exactly one sampled token.
    out = _sample(model, prompts, [1, 2, 3], stop_ids=set(range(10_000)))
    assert all(len(s.token_ids) == 1 for s in out)  # the first id is a stop id: sampling stopped
    out = _sample(model, prompts, [1, 2, 3], stop_ids=set(), max_new_tokens=7)
    assert all(len(s.token_ids) == 7 for s in out)  # no stop id: cut at max_new_tokens


def test_top_p_keeps_the_smallest_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    lp = _process(logits, 1.0, 0.8)
    assert torch.isinf(lp[0, 2:]).all()  # 0.5 + 0.3 reaches 0.8: the rest is cut
    assert torch.allclose(lp[0, :2].exp(), torch.tensor([0.625, 0.375]))
