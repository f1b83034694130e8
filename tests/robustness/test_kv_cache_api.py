"""The HF sampler passes and reads the KV cache by the name the installed transformers uses.

transformers 5.2x renamed ``past_key_values`` to ``cache`` (in ``forward`` and in its outputs), and
the old name printed ``FutureWarning: past_key_values is deprecated`` on every step of a run. The
sampler now asks the model's ``forward`` which name it takes: the current model samples without a
warning, and a model with the old signature (the oldest transformers the package allows) gets
``past_key_values`` and samples the same ids, KV cache reuse across turns included.
"""

from __future__ import annotations

import logging
import warnings

import pytest
from torch import nn

from agentrl.learn.models import build_tiny_model
from agentrl.sampling.generate import sample_batch
from agentrl.sampling.kv_cache import EpisodeKVCache, cache_kwarg

STOPS = {7, 8, 9}
PROMPTS = [[1, 5, 6, 10, 11, 12], [1, 5, 20, 21]]


class _Out(dict):
    """A transformers-4.x-like output: a mapping with ``logits`` and ``past_key_values`` (no
    ``cache``), each readable as an attribute too."""

    def __getattr__(self, name: str) -> object:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class OldSignature(nn.Module):
    """The same model behind the pre-rename API: ``forward(..., past_key_values=...)``, and the cache
    returned as ``past_key_values``. Records the keyword it was given the cache by."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.seen: list[str] = []

    def forward(
        self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=True
    ):  # type: ignore[no-untyped-def]
        self.seen.append("past_key_values")
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
            use_cache=use_cache, **{cache_kwarg(self.model): past_key_values},
        )  # fmt: skip
        return _Out(
            logits=out.logits, past_key_values=out["cache"] if "cache" in list(out.keys()) else out[1]
        )


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(300, "tiny:layers=2,hidden=32,heads=2,kv_heads=1", seed=3).eval()


def _sample(model, cache=None, keys=None):  # type: ignore[no-untyped-def]
    return sample_batch(
        model, PROMPTS, seeds=[1, 2], stop_ids=STOPS, pad_id=0, max_new_tokens=6, cache=cache, keys=keys
    )


def test_sampling_prints_no_deprecation_warning(model, monkeypatch):
    # transformers warns twice: warnings.warn(FutureWarning) for the keyword, and its logger's
    # warning_once (cached per process, so recorded here by replacing it) for the output attribute
    logged: list[str] = []
    monkeypatch.setattr(
        logging.Logger, "warning_once", lambda self, msg, *a, **k: logged.append(str(msg)), raising=False
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _sample(model)
        _sample(model, EpisodeKVCache(10_000), ["a", "b"])
    said = [str(w.message) for w in caught] + logged
    bad = [m for m in said if "past_key_values" in m or "cache_params" in m]
    assert not bad, bad


def test_the_old_keyword_still_samples_the_same_ids(model):
    old = OldSignature(model)
    assert cache_kwarg(old) == "past_key_values"
    assert [s.token_ids for s in _sample(old)] == [s.token_ids for s in _sample(model)]
    assert old.seen and set(old.seen) == {"past_key_values"}
    # two turns through a KV cache: the second reuses the first's keys and values on both APIs
    for m in (model, old):
        cache = EpisodeKVCache(10_000)
        first = _sample(m, cache, ["a", "b"])
        longer = [p + s.token_ids + [13, 14] for p, s in zip(PROMPTS, first, strict=True)]
        again = sample_batch(
            m, longer, seeds=[3, 4], stop_ids=STOPS, pad_id=0, max_new_tokens=4, cache=cache, keys=["a", "b"]
        )
        assert cache.hits == 2 and all(s.prefill_tokens < len(p) for s, p in zip(again, longer, strict=True))
        if m is model:
            want = [s.token_ids for s in again]
        else:
            assert [s.token_ids for s in again] == want
