"""A byte-level BPE tokenizer trained in-process, with a ChatML chat template.

For ``tiny:`` models (tests, the CPU quickstart): no download, a few seconds of training on the
texts the agent will read and write (the suite's corpus, prompts, oracle turns). The template is
append-only ChatML with Hermes ``<tool_call>`` blocks, so the token expander handles it exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["CHATML_TEMPLATE", "MAX_RUN_CHARS", "MAX_TEXT_CHARS", "bounded_corpus", "train_chat_tokenizer"]

# BPE training costs grow with the square of a word's length: one task prompt of 3 MB without
# whitespace kept the trainer busy for minutes, deaf to Ctrl-C (the work runs in Rust).
MAX_TEXT_CHARS = 100_000  # a text's tail past this teaches the tokenizer nothing its head does not
MAX_RUN_CHARS = 256  # a run of non-space characters is cut into pieces of at most this many

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


def bounded_corpus(
    texts: Iterable[str], max_text_chars: int = MAX_TEXT_CHARS, max_run_chars: int = MAX_RUN_CHARS
) -> Iterator[str]:
    """``texts`` as the tokenizer trains on them: each cut to its first ``max_text_chars`` characters,
    and each run of more than ``max_run_chars`` non-space characters split into pieces of that size
    (yielded as texts of their own, so no word the BPE trainer counts is longer)."""
    long_run = re.compile(rf"\S{{{max_run_chars + 1},}}")
    for text in texts:
        text, start = text[:max_text_chars], 0
        for m in long_run.finditer(text):
            run = m.group()
            yield text[start : m.start()]
            yield from (run[i : i + max_run_chars] for i in range(0, len(run), max_run_chars))
            start = m.end()
        yield text[start:]


#: GPT-2's pre-tokenizing split, with a decimal point and the digit after it kept together (``.0``).
_DECIMAL_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d|\.\p{N}| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def train_chat_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 2048,
    max_token_length: int | None = None,
    decimal_tokens: bool = False,
) -> Any:
    """Train a byte-level BPE on ``texts`` and wrap it as a ``PreTrainedTokenizerFast`` with the
    ChatML template; EOS (the stop token) is ``<|im_end|>``, padding ``<|endoftext|>``.

    ``max_token_length``: no token longer than this many characters. A tokenizer trained on a few
    companies' pages otherwise learns each of their names as one token, which a model can only
    recall; with short tokens, every name (an unseen one too) is a few pieces shared with others,
    which a model can copy. ``texts`` pass through ``bounded_corpus`` first, so training takes
    seconds whatever they hold.

    ``decimal_tokens``: a decimal point and the digit after it are one piece (``$33.0`` is ``33`` and
    ``.0``), where GPT-2's split makes them two (``33``, ``.``, ``0``). Copying a figure's decimal then
    follows its integer part (the previous token, a one-step match) instead of a ``.`` that every
    figure has (a two-step one), which a small model did not learn (``agentrl.train.copying``)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    if decimal_tokens:
        from tokenizers import Regex

        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_DECIMAL_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        **({"max_token_length": max_token_length} if max_token_length else {}),
    )
    tok.train_from_iterator(bounded_corpus(texts), trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok)
    hf.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    hf.eos_token, hf.pad_token = "<|im_end|>", "<|endoftext|>"
    hf.chat_template = CHATML_TEMPLATE
    return hf
