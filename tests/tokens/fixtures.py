"""Tiny tokenizers trained in-process and chat templates of three families, for tests and benchmarks.

``make_tokenizer(family)`` returns a ``PreTrainedTokenizerFast`` (byte-level BPE trained on a few KB
of text, no download) whose ``chat_template``, BOS and EOS follow one family:

- ``"chatml"``: Qwen-style ``<|im_start|>role\\n...<|im_end|>\\n``, ``<tool_call>`` JSON inside the
  assistant turn, consecutive tool results grouped under one ``user`` header in ``<tool_response>``
  blocks, and ``<think>`` reasoning kept only after the last user message (Qwen3-style stripping).
- ``"llama3"``: ``bos_token`` written by the template (and added by the tokenizer's default
  ``encode``, as in Llama 3: the double-BOS trap), ``<|start_header_id|>role<|end_header_id|>``
  headers, ``<|eot_id|>`` as the stop token, content trimmed.
- ``"glm"``: ``[gMASK]<sop>`` prefix and headers ``<|user|>``/``<|assistant|>``/``<|observation|>``;
  no end-of-turn token, so the model stops by sampling the next role header.

The trainer tests reuse these; the training is cached per process (about 0.1 s).
"""

from __future__ import annotations

import copy
import functools
from typing import Literal

Family = Literal["chatml", "llama3", "glm"]

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
]
# Added but not special, as in Qwen3: they survive skip_special_tokens.
ADDED_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

CHATML_TEMPLATE = r"""
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- for m in messages -%}
{%- if m.role == 'system' or m.role == 'user' -%}
{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' -}}
{%- elif m.role == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- if m.reasoning_content and loop.index0 > ns.last_user -%}
{{- '<think>\n' + m.reasoning_content + '\n</think>\n\n' -}}
{%- endif -%}
{{- m.content or '' -}}
{%- for tc in (m.tool_calls or []) -%}
{{- '\n<tool_call>\n{"name": "' + tc.function.name + '", "arguments": ' + (tc.function.arguments | tojson) + '}\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif m.role == 'tool' -%}
{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + m.content + '\n</tool_response>' -}}
{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}
{%- endif -%}
"""

LLAMA3_TEMPLATE = r"""
{{- bos_token -}}
{%- for m in messages -%}
{{- '<|start_header_id|>' + ('ipython' if m.role == 'tool' else m.role) + '<|end_header_id|>\n\n' -}}
{%- if m.role == 'assistant' and m.tool_calls -%}
{{- (m.content or '') | trim -}}
{%- for tc in m.tool_calls -%}
{{- '{"name": "' + tc.function.name + '", "parameters": ' + (tc.function.arguments | tojson) + '}' -}}
{%- endfor -%}
{%- else -%}
{{- (m.content or '') | trim -}}
{%- endif -%}
{{- '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}
"""

GLM_TEMPLATE = r"""
{{- '[gMASK]<sop>' -}}
{%- for m in messages -%}
{%- if m.role == 'system' -%}{{- '<|system|>\n' + m.content -}}
{%- elif m.role == 'user' -%}{{- '<|user|>\n' + m.content -}}
{%- elif m.role == 'assistant' -%}
{{- '<|assistant|>\n' + (m.content or '') -}}
{%- for tc in (m.tool_calls or []) -%}
{{- '\n<tool_call>' + tc.function.name + '\n' + (tc.function.arguments | tojson) + '</tool_call>' -}}
{%- endfor -%}
{%- elif m.role == 'tool' -%}
{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|observation|>' -}}{%- endif -%}
{{- '\n<tool_response>\n' + m.content + '\n</tool_response>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}
"""

TEMPLATES: dict[str, str] = {
    "chatml": CHATML_TEMPLATE.strip(),
    "llama3": LLAMA3_TEMPLATE.strip(),
    "glm": GLM_TEMPLATE.strip(),
}

_WORDS_TEXT = (
    "the search agent reads pages and writes a report with citations about revenue growth cloud "
    "quarter results announcement according to sources published date query answer open url "
    "title snippet summary Alphabet Google Microsoft Amazon research paper model training reward "
    "policy token tool call response observation Hello hello world think step first then finally "
    "because however therefore example result results value values number numbers billion million "
    "percent year years 2024 2025 Q1 Q2 Q3 Q4 report reports analysis data table chart figure"
)
_WORDS = _WORDS_TEXT.split()


def training_text() -> str:
    """A few KB of deterministic English-like text with JSON, code and non-ASCII characters."""
    lines = []
    for i in range(160):
        w = [_WORDS[(i * 7 + j * 13) % len(_WORDS)] for j in range(6 + i % 7)]
        lines.append(" ".join(w).capitalize() + ".")
        if i % 5 == 0:
            lines.append('{"name": "search", "arguments": {"query": "' + " ".join(w[:3]) + '", "k": 5}}')
        if i % 11 == 0:
            lines.append("1. [example.com] " + " ".join(w) + " -- https://example.com/" + w[0])
    lines.append("Unicode: café naïve résumé Zürich — “quotes” 東京 data ✓ 🙂")
    return "\n".join(lines)


@functools.cache
def _trained_tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([training_text()], trainer=trainer)
    return tok.to_str()


@functools.cache
def _base_tokenizer():  # type: ignore[no-untyped-def]
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_str(_trained_tokenizer_json())
    hf = PreTrainedTokenizerFast(tokenizer_object=tok)
    hf.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    return hf


def make_tokenizer(family: Family = "chatml"):  # type: ignore[no-untyped-def]
    """A fresh ``PreTrainedTokenizerFast`` for ``family`` (copy of a cached trained one; mutate freely)."""
    tok = copy.deepcopy(_base_tokenizer())
    tok.chat_template = TEMPLATES[family]
    if family == "chatml":
        tok.eos_token, tok.pad_token, tok.bos_token = "<|im_end|>", "<|endoftext|>", None
    elif family == "llama3":
        from tokenizers import processors

        tok.bos_token, tok.eos_token, tok.pad_token = "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>"
        # Like Llama 3, the tokenizer adds BOS by default although the template writes one too.
        bos = ("<|begin_of_text|>", tok.bos_token_id)
        tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A",
            pair="<|begin_of_text|> $A <|begin_of_text|> $B",
            special_tokens=[bos],
        )
    elif family == "glm":
        tok.eos_token, tok.pad_token, tok.bos_token = "<|endoftext|>", "<|endoftext|>", None
    else:
        raise ValueError(f"unknown template family {family!r}")
    return tok


@functools.cache
def make_tokenizer_cached(family: Family = "chatml"):  # type: ignore[no-untyped-def]
    """A shared (do not mutate) tokenizer of ``family``, built once per process."""
    return make_tokenizer(family)
