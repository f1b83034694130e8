"""Package-wide contracts: explicit public APIs, the layer rules of DESIGN.md, a fast CLI."""

import ast
import importlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "agentrl"

# DESIGN.md: a module imports only from layers below it.
LAYERS = {
    "errors": -1,
    "credentials": 0,
    "seeds": 0,
    "trajectory": 0,
    "algos": 0,
    "judge": 1,
    "tokens": 1,
    "env": 2,
    "policy": 2,
    "rollout": 3,
    "train": 4,
    "replay": 5,
    "explain": 5,
    "integrations": 5,
    "cli": 6,
}
# Same-layer imports that DESIGN.md allows explicitly.
ALLOWED_SIDEWAYS: set[tuple[str, str]] = set()
# Modules that must not import any other agentrl module (DESIGN.md: "algos never imports a model").
STANDALONE = {"algos", "seeds"}


def _top(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "agentrl" else None


def _agentrl_imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno


def test_layering():
    problems = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        own = rel.parts[0].removesuffix(".py")
        if own not in LAYERS or rel.name == "__main__.py":  # `python -m` entry points are CLI glue
            continue
        for module, lineno in _agentrl_imports(path):
            other = _top(module)
            if other is None or other == own or other not in LAYERS:
                continue
            if own in STANDALONE and other != "errors":
                problems.append(f"{rel}:{lineno}: {own} must not import agentrl.{other}")
            elif LAYERS[other] >= LAYERS[own] and (own, other) not in ALLOWED_SIDEWAYS:
                problems.append(
                    f"{rel}:{lineno}: layer {LAYERS[own]} ({own}) imports layer {LAYERS[other]} ({other})"
                )
    assert not problems, "\n".join(problems)


def test_algos_imports_no_model_library():
    for path in (PKG / "algos").rglob("*.py"):
        for module, lineno in _agentrl_imports(path):
            assert module.split(".")[0] not in {"transformers", "vllm", "peft"}, f"{path}:{lineno}"


PUBLIC = [
    "agentrl",
    "agentrl.errors",
    "agentrl.credentials",
    "agentrl.trajectory",
    "agentrl.algos",
    "agentrl.explain",
    "agentrl.replay",
    "agentrl.integrations",
    "agentrl.train",
    "agentrl.rollout",
    "agentrl.policy",
    "agentrl.env",
    "agentrl.judge",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_exported_members(name):
    mod = importlib.import_module(name)
    assert hasattr(mod, "__all__"), f"{name} needs an explicit __all__"
    for member in mod.__all__:
        assert hasattr(mod, member), f"{name}.__all__ names {member!r}, which does not exist"
    if name != "agentrl":
        public = {
            n
            for n, v in vars(mod).items()
            if not n.startswith("_") and getattr(v, "__module__", "").startswith(name) and callable(v)
        }
        assert public <= set(mod.__all__), (
            f"{name}: public but not in __all__: {sorted(public - set(mod.__all__))}"
        )


def test_top_level_import_is_light():
    code = "import sys, agentrl, agentrl.cli; print(sorted(m for m in ('torch', 'transformers', 'litellm') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_is_fast():
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "agentrl", "--help"], capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    assert r.returncode == 0 and "explain" in r.stdout
    # A generous bound for a loaded CI box; the point is that no heavy library is imported.
    assert elapsed < 5.0
    code = "import sys; from agentrl.cli import build_parser; build_parser(); print(sorted(m for m in ('torch', 'transformers', 'litellm', 'gymnasium', 'bm25s') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"building the CLI parser imported {out.strip()}"


def test_cli_without_command_prints_help(capsys):
    from agentrl.cli import main

    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out
