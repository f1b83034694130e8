"""``agentrl model``: bring a model into a form the trainer and ``--policy hf:`` read."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``model`` sub-command and its actions."""
    p = subparsers.add_parser(
        "model",
        help="import a model (GGUF → transformers directory)",
        description="Prepare local models for `agentrl train` and `agentrl rollout --policy hf:DIR`.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    g = actions.add_parser(
        "import-gguf",
        help="write a GGUF file as a transformers directory (extra 'gguf')",
        description="Dequantise a GGUF file to float32 and write a transformers directory: "
        "config.json, model.safetensors, generation_config.json, the tokenizer and its chat template "
        "(from the GGUF metadata). Needs `pip install 'agentrl[gguf]'`.",
    )
    g.add_argument("file", help="the .gguf file")
    g.add_argument("--out", required=True, help="the directory to write (must not exist)")
    g.set_defaults(handler=_import_gguf)


def _import_gguf(args: argparse.Namespace) -> int:
    from agentrl.jsonl import dumps
    from agentrl.learn.gguf import import_gguf
    from agentrl.train.progress import LineProgress

    out = import_gguf(args.file, args.out, phase=LineProgress().phase)  # on stderr; stdout: the JSON
    print(dumps({"out": str(out), "files": sorted(p.name for p in out.iterdir())}))
    return 0
