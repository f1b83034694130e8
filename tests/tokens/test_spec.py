"""``SamplingSpec``: one builder of a run's stop ids, limits and expander; recorded in the run and read
back by replay, explain and the report, so their rows are the trainer's."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from agentrl.errors import ConfigError
from agentrl.tokens import Expander, SamplingSpec, read_sampling_spec, run_expander, sampling_spec
from tests.tokens.helpers import enc, sampled, tid, traj


def test_a_spec_round_trips_through_json_and_builds_its_expander(chatml, tmp_path):
    spec = sampling_spec(
        chatml,
        generation_config=SimpleNamespace(eos_token_id=[tid(chatml, "<|eot_id|>"), 4]),
        max_len=300,
        max_new_tokens=40,
        temperature=0.7,
        top_p=0.9,
    )
    assert spec.stop_ids == {tid(chatml, "<|im_end|>"), tid(chatml, "<|eot_id|>"), 4}
    assert (spec.max_len, spec.max_new_tokens, spec.temperature, spec.top_p) == (300, 40, 0.7, 0.9)
    path = tmp_path / "sampling.json"
    path.write_text(json.dumps(spec.to_json()))
    assert read_sampling_spec(path) == spec
    exp = spec.expander(chatml)
    assert exp.stop_ids == spec.stop_ids and exp.max_len == 300
    assert spec.expander(chatml, max_len=50).max_len == 50 and spec.with_max_len(None) is spec
    assert read_sampling_spec(tmp_path / "absent.json") is None
    path.write_text('{"stop_ids": 3}')
    with pytest.raises(ConfigError, match="not a sampling spec"):
        read_sampling_spec(path)
    path.write_text("{")
    with pytest.raises(ConfigError, match="not JSON"):
        read_sampling_spec(path)


def test_the_generation_config_saved_beside_the_tokenizer_counts(chatml, tmp_path):
    from transformers import AutoTokenizer

    chatml.save_pretrained(tmp_path)
    eot = tid(chatml, "<|eot_id|>")
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": eot}))
    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    assert sampling_spec(loaded).stop_ids == {tid(chatml, "<|im_end|>"), eot}
    (tmp_path / "generation_config.json").unlink()
    assert sampling_spec(loaded).stop_ids == {tid(chatml, "<|im_end|>")}


def test_a_turn_ended_by_the_models_eos_reads_as_the_run_sampled_it(chatml, tmp_path):
    """A model whose EOS (here ``<|eot_id|>``) is not its template's end of turn: with the run's
    recorded spec, turns that end on it are sampled stops (a strict check accepts them); an expander
    that knows only the template's stop ids reads each as a rewrite of the conversation (a fork)."""
    eot = tid(chatml, "<|eot_id|>")
    spec = sampling_spec(chatml, generation_config=SimpleNamespace(eos_token_id=eot), max_len=512)
    path = tmp_path / "sampling.json"
    path.write_text(json.dumps(spec.to_json()))
    t = traj(
        {"role": "user", "content": "2+2?"},
        sampled([*enc(chatml, "The answer is 4."), eot], content="The answer is 4."),
        {"role": "user", "content": "3+3?"},
        sampled([*enc(chatml, "It is 6."), eot], content="It is 6."),
    )
    ours = run_expander(chatml, path)
    assert ours.stop_ids == spec.stop_ids and ours.max_len == 512
    assert spec.expander(chatml, check="strict").expand(t).forks == []
    assert Expander(chatml, check="strict").expand(t).forks == [1, 3]
    assert run_expander(chatml, None).stop_ids == Expander(chatml).stop_ids == {tid(chatml, "<|im_end|>")}
    assert run_expander(chatml, path, max_len=8).expand(t).input_ids.shape[0] == 8


def test_a_run_without_a_recorded_spec_uses_the_tokenizers_own(chatml, tmp_path):
    exp = run_expander(chatml, tmp_path / "sampling.json", max_len=64)
    assert exp.stop_ids == {tid(chatml, "<|im_end|>")} and exp.max_len == 64
    assert SamplingSpec.from_json({"stop_ids": [2, "7"]}).stop_ids == {2, 7}
