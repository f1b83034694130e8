"""A tiny model that answers: the training tests' policy.

A randomly initialised model almost never ends a turn on its own (``<|im_end|>`` is one token in
hundreds), so every turn is cut at ``max_new_tokens`` — and a cut turn is never a report: every
episode is unanswered, every reward 0, and a training test that compares weights, losses or ranks
compares zeros. ``answering_model_dir`` builds a transformers directory (a 1-layer Qwen2 model and a
ChatML tokenizer) trained for a few seconds to answer any conversation with one to four random words
and end its turn, so episodes are answered, their reports differ, and a surface rubric (letters,
digits, capitals) gives rewards that vary within a group. It is a normal model directory
(``model.path``), so torchrun workers load it like any pretrained model.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

WORDS = [
    *("alpha", "beta", "Q1", "2024", "cloud", "revenue", "AB", "x", "42", "report", "EU", "growth"),
    *("7", "ok", "margin", "summary", "HQ", "data"),
]


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def answering_model_dir(root: Path | None = None, seed: int = 0, steps: int = 60) -> Path:
    """Build (once: an existing directory is reused) and return the model directory: ``root``, or a
    directory in the test session's cache (``AGENTRL_TEST_CACHE``, which subprocesses inherit)."""
    if root is None:
        base = os.environ.get("AGENTRL_TEST_CACHE") or tempfile.gettempdir()
        root = Path(base) / f"answering-model-{seed}-{steps}"
    if (root / "config.json").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    import torch

    from agentrl.learn.models import build_tiny_model
    from agentrl.train.tokenizer import train_chat_tokenizer

    rng = random.Random(seed)
    tok = train_chat_tokenizer([_words(rng, 3, 30) for _ in range(400)] * 2, 400)
    eos = tok.convert_tokens_to_ids(tok.eos_token)
    model = build_tiny_model(len(tok), "tiny:layers=1,hidden=32,heads=2,kv_heads=1", seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(steps):
            rows = []
            for _ in range(16):  # prompts of varied length, so the answer does not depend on position
                chat = [
                    {"role": "system", "content": _words(rng, 5, 300)},
                    {"role": "user", "content": _words(rng, 3, 40)},
                ]
                prompt = list(
                    tok.apply_chat_template(
                        chat, add_generation_prompt=True, tokenize=True, return_dict=True
                    )["input_ids"]
                )
                rows.append((prompt, [*tok(_words(rng, 1, 4))["input_ids"], eos]))
            width = max(len(p) + len(a) for p, a in rows)
            ids = torch.full((len(rows), width), tok.pad_token_id)
            labels = torch.full((len(rows), width), -100)
            att = torch.zeros(len(rows), width, dtype=torch.long)
            for i, (p, a) in enumerate(rows):
                ids[i, : len(p) + len(a)] = torch.tensor(p + a)
                labels[i, len(p) : len(p) + len(a)] = torch.tensor(a)
                att[i, : len(p) + len(a)] = 1
            model(input_ids=ids, attention_mask=att, labels=labels).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    tmp = Path(tempfile.mkdtemp(prefix=root.name, dir=root.parent))
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(root)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return root
