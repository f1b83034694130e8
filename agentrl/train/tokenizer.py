"""A byte-level BPE tokenizer trained in-process, with a ChatML chat template.

For ``tiny:`` models (tests, the CPU quickstart): no download, a few seconds of training on the
texts the agent will read and write (the suite's corpus, prompts, oracle turns). The template is
append-only ChatML with Hermes ``<tool_call>`` blocks, so the token expander handles it exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["CHATML_TEMPLATE", "train_chat_tokenizer"]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added as ordinary (non-special) tokens so that decoding with skip_special_tokens keeps them.
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<think>", "</think>"]

# Tool calls the env parsed out of a turn's text are already in the content: render them once.
CHATML_TEMPLATE = (
    "{%- for m in messages -%}"
    "{{- '<|im_start|>' + m.role + '\\n' -}}"
    "{%- if m.content is string -%}{{- m.content -}}{%- endif -%}"
    "{%- if m.role == 'assistant' and m.tool_calls and '<tool_call>' not in (m.content or '') -%}"
    "{%- for tc in m.tool_calls -%}"
    '{{- \'\\n<tool_call>\\n{"name": "\' + tc.function.name + \'", "arguments": \' '
    "+ (tc.function.arguments | tojson) + '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def train_chat_tokenizer(
    texts: Iterable[str], vocab_size: int = 2048, max_token_length: int | None = None
) -> Any:
    """Train a byte-level BPE on ``texts`` and wrap it as a ``PreTrainedTokenizerFast`` with the
    ChatML template; EOS (the stop token) is ``<|im_end|>``, padding ``<|endoftext|>``.

    ``max_token_length``: no token longer than this many characters. A tokenizer trained on a few
    companies' pages otherwise learns each of their names as one token, which a model can only
    recall; with short tokens, every name (an unseen one too) is a few pieces shared with others,
    which a model can copy."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        **({"max_token_length": max_token_length} if max_token_length else {}),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok)
    hf.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    hf.eos_token, hf.pad_token = "<|im_end|>", "<|endoftext|>"
    hf.chat_template = CHATML_TEMPLATE
    return hf
