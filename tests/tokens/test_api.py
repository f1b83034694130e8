"""The public surface of agentrl.tokens and its layering."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import agentrl.tokens


def test_exported_members() -> None:
    # Submodules appear as attributes once something imported them; they are not exports.
    submodules = {p.stem for p in pathlib.Path(agentrl.tokens.__file__).parent.glob("*.py")} | {"errors"}
    exported = {n for n in dir(agentrl.tokens) if not n.startswith("_")} - submodules
    assert exported == set(agentrl.tokens.__all__)


def test_imports_only_layer_zero_and_errors_from_agentrl() -> None:
    # Layer 1: trajectory and algos (layer 0, for the log-softmax of token_logprobs) and errors; never judge.
    root = pathlib.Path(agentrl.tokens.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentrl"):
                assert node.module.split(".")[1] in {"tokens", "trajectory", "algos", "errors"}, (
                    path.name,
                    node.module,
                )


def test_importing_tokens_does_not_import_torch() -> None:
    code = "import sys, agentrl.tokens; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
