"""``expander_for``: the engine adapters' expander is the one ``sampling_spec`` builds, as the native
trainer's is; Expander options and extra stop ids pass through, template options reach renders."""

from __future__ import annotations

import json

from agentrl.integrations.settings import expander_for
from agentrl.tokens import sampling_spec
from tests.tokens.fixtures import make_tokenizer_cached
from tests.tokens.helpers import tid


def test_the_adapters_expander_is_the_sampling_specs():
    tok = make_tokenizer_cached("chatml")
    exp = expander_for(tok)
    assert exp.stop_ids == sampling_spec(tok).stop_ids == {tid(tok, "<|im_end|>")}
    assert expander_for(tok) is exp  # one per (tokenizer, options) per process


def test_expander_options_and_more_stop_ids_pass_through():
    tok = make_tokenizer_cached("chatml")
    eot = tid(tok, "<|eot_id|>")
    exp = expander_for(tok, stop_token_ids=[eot], check="strict", max_len=100, tool_arguments="string")
    assert exp.stop_ids == {tid(tok, "<|im_end|>"), eot}
    assert (exp.check, exp.max_len, exp.tool_arguments) == ("strict", 100, "string")


def test_the_eos_of_the_generation_config_beside_the_tokenizer_is_a_stop_id(tmp_path):
    from transformers import AutoTokenizer

    tok = make_tokenizer_cached("chatml")
    tok.save_pretrained(tmp_path)
    eot = tid(tok, "<|eot_id|>")
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [eot]}))
    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    assert eot in expander_for(loaded).stop_ids
