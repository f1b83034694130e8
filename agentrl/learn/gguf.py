"""A GGUF file (llama.cpp's format) as a plain transformers directory: ``agentrl model import-gguf``.

transformers reads a GGUF with ``from_pretrained(dir, gguf_file=name)`` (it needs the ``gguf`` and
``accelerate`` packages) and dequantises every tensor to float32, but the model it returns keeps a
GGUF quantization config and refuses ``save_pretrained``. The import rebuilds the model from its
config without that entry, loads the dequantised weights into it, and writes what any
``from_pretrained(dir)`` reads: ``config.json``, ``model.safetensors``, ``generation_config.json``
and the tokenizer with its chat template (from the GGUF's ``tokenizer.chat_template``). The
directory is written next to ``out`` and renamed into place, so ``out`` exists only when complete.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError

__all__ = ["GGUF_MAGIC", "import_gguf", "is_gguf"]

GGUF_MAGIC = b"GGUF"
EXTRA_HINT = "pip install 'agentrl[gguf]' (gguf and accelerate)"


def is_gguf(path: Path) -> bool:
    """Whether ``path`` is a file that starts with the GGUF magic bytes."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except (IsADirectoryError, FileNotFoundError):
        return False


def _check_extra() -> None:
    import importlib.util

    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"reading GGUF files needs {' and '.join(missing)}: {EXTRA_HINT}")


def _chat_template(file: Path) -> str | None:
    """``tokenizer.chat_template`` of the GGUF's metadata (None when absent)."""
    from gguf import GGUFReader

    field = GGUFReader(file).fields.get("tokenizer.chat_template")
    if field is None or not field.data:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def _plain_model(model: Any) -> Any:
    """``model``'s architecture and weights, without its GGUF quantization config (serialisable)."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg_dict = model.config.to_dict()
    cfg_dict.pop("quantization_config", None)
    config = type(model.config).from_dict(cfg_dict)
    with torch.random.fork_rng(devices=[]):  # the fresh weights are overwritten: leave the caller's RNG
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    return plain.eval()


def import_gguf(file: str | Path, out: str | Path, phase: Callable[[str], Any] | None = None) -> Path:
    """Write ``file`` (a GGUF) as a transformers directory at ``out`` (module docstring); returns
    ``out``. ``ConfigError`` (one line) when the extra is missing, ``file`` is not a GGUF, or ``out``
    already exists. ``phase(name)``: a context manager around each step, to show it (the CLI's
    progress)."""
    phase = phase or (lambda name: contextlib.nullcontext())
    file, out = Path(file), Path(out)
    if not file.is_file():
        raise ConfigError(f"{file}: no such file")
    if not is_gguf(file):
        raise ConfigError(f"{file}: not a GGUF file (it does not start with the GGUF magic bytes)")
    if out.exists():
        raise ConfigError(f"--out {out}: already exists; remove it or choose another directory")
    _check_extra()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with phase(f"reading and dequantising {file.name}"):
            model = AutoModelForCausalLM.from_pretrained(file.parent, gguf_file=file.name)
            tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name)
    except (ValueError, KeyError, OSError) as e:  # an architecture transformers cannot read from GGUF
        raise ConfigError(f"{file}: transformers cannot load this GGUF: {str(e)[:300]}") from None
    template = _chat_template(file)
    if template:
        tokenizer.chat_template = template
    plain = _plain_model(model)
    tmp = out.with_name(f".{out.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        with phase(f"writing {out}"):
            plain.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
