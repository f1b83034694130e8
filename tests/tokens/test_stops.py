"""``turn_stop_ids``: a turn ends on the template's end-of-turn ids ∪ the model's EOS ids, whatever
the tokenizer calls EOS."""

from __future__ import annotations

import pytest
from transformers import GenerationConfig

from agentrl.errors import TemplateError
from agentrl.tokens import end_of_turn_ids, generation_eos_ids, turn_stop_ids
from agentrl.tokens.template import ChatTemplate
from tests.tokens.fixtures import make_tokenizer

# A base-Qwen-like setup: turns end with <|im_end|>, the tokenizer's EOS is <|endoftext|>.
ENDS_WITH_IM_END = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# Whitespace, then the end-of-turn (Llama-2-style ``' ' + content + ' ' + eos``).
SPACE_THEN_EOT = (
    "{%- for m in messages -%}{%- if m.role == 'assistant' -%}{{- ' ' + m.content + ' <|eot_id|>' -}}"
    "{%- else -%}{{- '<|start_header_id|>' + m.content -}}{%- endif -%}{%- endfor -%}"
)
# Nothing after an assistant turn: the next role header is where the model stops (GLM-style).
HEADER_STOPS = (
    "{%- for m in messages -%}{{- '<|' + m.role + '|>\\n' + (m.content or '') -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)
# Templates that refuse an assistant message first (Llama, Mistral) still give their end-of-turn.
USER_FIRST = (
    "{%- if messages[0].role != 'user' and messages[0].role != 'system' -%}"
    "{{- raise_exception('conversations start with a user message') -}}{%- endif -%}" + ENDS_WITH_IM_END
)


def _tok(template: str, eos: str | None):
    tok = make_tokenizer("chatml")
    tok.chat_template = template
    tok.eos_token = eos
    return tok


def test_end_of_turn_differs_from_eos_and_both_stop():
    tok = _tok(ENDS_WITH_IM_END, "<|endoftext|>")
    im_end, eot = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert end_of_turn_ids(ChatTemplate(tok)) == {im_end}
    assert turn_stop_ids(tok) == {im_end, eot}


def test_generation_config_eos_ids_join_int_or_list():
    tok = _tok(ENDS_WITH_IM_END, None)
    im_end, eot, eot_id = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>", "<|eot_id|>"])
    assert generation_eos_ids(GenerationConfig(eos_token_id=eot)) == {eot}
    assert generation_eos_ids(GenerationConfig(eos_token_id=[eot, eot_id])) == {eot, eot_id}
    assert generation_eos_ids(None) == set()
    assert turn_stop_ids(tok) == {im_end}
    gen = GenerationConfig(eos_token_id=[eot, eot_id, 10**9])  # an id outside the vocabulary is dropped
    assert turn_stop_ids(tok, generation_config=gen) == {im_end, eot, eot_id}


@pytest.mark.parametrize(
    ("template", "expected"),
    [(SPACE_THEN_EOT, "<|eot_id|>"), (HEADER_STOPS, "<|user|>"), (USER_FIRST, "<|im_end|>")],
)
def test_end_of_turn_is_read_robustly(template, expected):
    tok = _tok(template, None)
    assert end_of_turn_ids(ChatTemplate(tok)) == {tok.convert_tokens_to_ids(expected)}


def test_no_stop_at_all_is_an_error():
    plain = "{%- for m in messages -%}{{- m.role + ': ' + (m.content or '') + '\\n\\n' -}}{%- endfor -%}"
    tok = _tok(plain, None)
    assert end_of_turn_ids(ChatTemplate(tok)) == set()
    with pytest.raises(TemplateError, match="no stop token"):
        turn_stop_ids(tok)


FAMILY_NAMES = ["chatml", "llama3", "glm", "qwen25", "qwen3", "llama31", "mistral", "hermes", "smollm2"]


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_the_expander_self_test_and_turn_stop_ids_agree(family):
    """One owner: what the trainer and ``hf:`` sample until is what an expander given no stop ids
    learns from its self-test, on every template family."""
    from agentrl.tokens import Expander
    from tests.tokens.families import FAMILIES, TOOLS, family_tokenizer

    tok = family_tokenizer(family) if family in FAMILIES else make_tokenizer(family)
    kwargs = {"tools": TOOLS} if family in ("qwen25", "llama31") else {}
    exp = Expander(tok, **kwargs)
    assert exp.stop_ids == turn_stop_ids(tok, **kwargs)
    assert exp.report.stop_token_ids == sorted(exp.stop_ids)


def test_glm_turns_stop_on_every_header_that_can_follow_them():
    """GLM writes nothing after a turn: a turn that calls a tool ends with ``<|observation|>``, one
    that answers with ``<|user|>``; both stop sampling, not only the user's."""
    tok = make_tokenizer("glm")
    user, obs, eot = tok.convert_tokens_to_ids(["<|user|>", "<|observation|>", "<|endoftext|>"])
    assert end_of_turn_ids(ChatTemplate(tok)) == {user, obs}
    assert turn_stop_ids(tok) == {user, obs, eot}
