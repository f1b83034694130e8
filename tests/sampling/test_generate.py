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


def _counting(monkeypatch):  # type: ignore[no-untyped-def]
    """Count the rows the sampler drops from its batch."""
    from agentrl.sampling import generate

    dropped: list[int] = []
    real = generate._Batch.drop

    def drop(self, rows):  # type: ignore[no-untyped-def]
        dropped.extend(rows)
        return real(self, rows)

    monkeypatch.setattr(generate._Batch, "drop", drop)
    return dropped


@pytest.mark.parametrize("every", [1, 8])
def test_rows_that_stop_early_leave_the_batch_and_change_no_other_row(setup, monkeypatch, every):
    """One id in four stops a row, so rows end at different steps and leave the batch (``every``: a
    CPU checks stops each token, an accelerator every 8, decoding past a stop in between): each row
    is what it samples alone, ids and log-probs."""
    from agentrl.sampling import generate

    _, model, prompts = setup
    monkeypatch.setattr(generate._Batch, "__init__", _with_every(generate._Batch.__init__, every))
    dropped = _counting(monkeypatch)
    stops = set(range(0, 4000, 4))
    many = prompts * 3
    seeds = list(range(20, 20 + len(many)))
    together = _sample(model, many, seeds, stop_ids=stops, max_new_tokens=24)
    lengths = [len(s.token_ids) for s in together]
    assert len(set(lengths)) > 2 and max(lengths) > 3  # rows ended at different steps
    assert dropped  # and some left the batch
    for s, p, seed in zip(together, many, seeds, strict=True):
        (alone,) = _sample(model, [p], [seed], stop_ids=stops, max_new_tokens=24)
        assert s.token_ids == alone.token_ids
        assert s.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
        assert s.token_ids[-1] in stops or len(s.token_ids) == 24
        assert not any(t in stops for t in s.token_ids[:-1])  # kept up to its first stop, no further


def _with_every(init, every):  # type: ignore[no-untyped-def]
    def patched(self, *a, **kw):  # type: ignore[no-untyped-def]
        init(self, *a, **kw)
        self.every = every

    return patched


def test_the_preallocated_cache_decodes_as_the_dynamic_cache(setup):
    """The same decode steps through transformers' DynamicCache and through the buffers allocated
    once: the same logits, also after rows are dropped and after the buffers grow."""
    from transformers import DynamicCache

    from agentrl.sampling.decode_cache import PreallocatedLayer, preallocate

    _, model, prompts = setup
    ids = torch.tensor([prompts[0][:3], prompts[2][:3]])
    with torch.no_grad():
        outs = []
        for pre in (False, True):
            cache = DynamicCache()
            out = model(input_ids=ids, cache=cache, use_cache=True)
            if pre:
                assert preallocate(cache, 2)  # room for 2: the third step grows the buffers
                assert all(isinstance(layer, PreallocatedLayer) for layer in cache.layers)
            logits = [out.logits[:, -1]]
            for step in range(4):
                last = logits[-1]
                if step == 2:
                    cache.batch_select_indices(torch.tensor([1]))
                    last = last[[1]]
                nxt = last.argmax(-1, keepdim=True)
                out = model(input_ids=nxt, cache=cache, use_cache=True)
                logits.append(out.logits[:, -1])
            outs.append(logits)
    for a, b in zip(*outs, strict=True):
        assert a.shape == b.shape
        assert torch.allclose(a, b, atol=1e-6)
