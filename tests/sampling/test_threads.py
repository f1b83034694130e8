"""Intra-op threads while sampling (``agentrl.sampling.threads``): one thread for a small model on a
CPU, a count when one is given, the process's count put back after the rollout."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl.learn.models import build_tiny_model
from agentrl.sampling.threads import SMALL_MODEL_PARAMS, describe, intra_op_threads, sampling_threads
from agentrl.train import TrainConfig


def _model(hidden: int, layers: int) -> torch.nn.Module:
    cfg = LlamaConfig(vocab_size=50_000, hidden_size=hidden, intermediate_size=4 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4)  # fmt: skip
    with torch.device("meta"):
        return LlamaForCausalLM(cfg)


def test_auto_is_one_thread_for_a_small_model_on_a_cpu_and_a_count_is_taken_as_given():
    small = build_tiny_model(2048, "tiny:layers=2,hidden=128,heads=4,kv_heads=2")
    assert sampling_threads(small, "auto") == 1
    assert sampling_threads(small, 3) == 3 and sampling_threads(small, None) is None
    assert "sampling 1 (auto: 0.3M parameters" in describe(small, "auto")
    # the embeddings do not count: 50k ids of width 256 are 12.8M parameters, the body 1.6M
    wide_vocab = _model(256, 2)
    assert sum(p.numel() for p in wide_vocab.parameters()) > SMALL_MODEL_PARAMS
    from agentrl.sampling.threads import _body_params

    assert _body_params(wide_vocab) < SMALL_MODEL_PARAMS
    assert _body_params(_model(1024, 3)) > SMALL_MODEL_PARAMS  # 3 x 12.6M
    assert sampling_threads(wide_vocab, "auto") is None  # not on a CPU (meta): left alone


def test_the_body_decides_on_a_cpu(monkeypatch):
    from agentrl.sampling import threads

    small = build_tiny_model(2048, "tiny:layers=2,hidden=128,heads=4,kv_heads=2")
    monkeypatch.setattr(threads, "SMALL_MODEL_PARAMS", threads._body_params(small))  # now "not under"
    assert sampling_threads(small, "auto") is None
    monkeypatch.setattr(threads, "SMALL_MODEL_PARAMS", threads._body_params(small) + 1)
    assert sampling_threads(small, "auto") == 1


def test_the_count_is_set_for_the_block_and_put_back():
    before = torch.get_num_threads()
    with intra_op_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), intra_op_threads(1):
        raise RuntimeError("a failed rollout")
    assert torch.get_num_threads() == before


def test_the_engine_samples_with_its_threads(monkeypatch):
    """HFEngine.rollout runs its episodes inside ``intra_op_threads(self.threads)``."""
    from agentrl.sampling import hf

    seen: list[int] = []

    async def fake_run_episodes(*a, **kw):  # type: ignore[no-untyped-def]
        seen.append(torch.get_num_threads())
        return []

    monkeypatch.setattr(hf, "run_episodes", fake_run_episodes)
    model = build_tiny_model(64, "tiny:layers=1,hidden=32,heads=2,kv_heads=1")
    loop = hf.EpisodeLoop(spec=None, expander=None, executor=None)  # type: ignore[arg-type]
    monkeypatch.setattr(hf.EpisodeLoop, "stop_ids", property(lambda self: set()))
    monkeypatch.setattr(hf.EpisodeLoop, "limits", property(lambda self: None))
    monkeypatch.setattr(hf.EpisodeLoop, "temperature", property(lambda self: 1.0))
    monkeypatch.setattr(hf.EpisodeLoop, "top_p", property(lambda self: 1.0))
    before = torch.get_num_threads()
    hf.HFEngine(model, loop, pad_id=0, threads=1).rollout([], [])
    hf.HFEngine(model, loop, pad_id=0, threads=None).rollout([], [])
    assert seen == [1, before] and torch.get_num_threads() == before


def test_the_setting_is_validated():
    assert TrainConfig.model_validate({}).rollout.sampling_threads == "auto"
    assert TrainConfig.model_validate({"rollout": {"sampling_threads": 2}}).rollout.sampling_threads == 2
    for bad in ("many", 0):
        with pytest.raises(Exception, match="sampling_threads"):
            TrainConfig.model_validate({"rollout": {"sampling_threads": bad}})
