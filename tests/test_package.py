"""Package-wide contracts: explicit public APIs, the layer rules of DESIGN.md, a fast CLI."""

import ast
import importlib
import itertools
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
    "jsonl": -0.5,  # the one JSONL line reader: below every package that reads JSONL, above errors
    "atomic": -0.5,  # the one atomic write (temporary file, fsync, rename): below every writer (stdlib)
    "credentials": 0,
    "seeds": 0,
    "trajectory": 0,
    "algos": 0,
    "rundir": 0,
    "outputs": 0,
    "yamlload": -0.5,  # the one YAML loader: below the run directory, which reads a hand-made config.yaml
    "cachedir": 0,
    "hub": 0,  # hub ids: cached, or the hub answers (stdlib; httpx when asked)
    "runlock": 0,  # one writer per output (stdlib)
    "ranks": 0,  # which rank this process is: the one answer (torch.distributed, never imported here)
    "stopping": -0.5,  # the one stop flag, its stop points and signal handlers (stdlib)
    "judge": 1,
    "tokens": 1,
    "env": 2,
    "policy": 2,
    "learn": 2,
    "rollout": 3,
    "eval": 3.5,  # DESIGN.md's layer 7 beside train, but below it here: train calls the evaluation hook
    "sampling": 3.5,  # everything that samples tokens (HF, KV cache, vLLM, sampler process, engines)
    "train": 4,
    "replay": 5,
    "explain": 5,
    "integrations": 5,
    "cli": 6,
}
# The package-to-package arrows that exist by design: anything else is a failure, even when it goes
# down the layers (replay and explain share the update's code with train through `learn`, never by
# importing train; every episode — the trainer's, replay's re-runs, the engine adapters' — runs in
# the one loop, `rollout.episode`; `algos` and `seeds` import no other agentrl module).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "jsonl": {"errors"},
    "atomic": set(),
    "credentials": {"errors"},
    "trajectory": {"errors", "jsonl", "atomic"},
    "algos": set(),
    "seeds": set(),
    "rundir": {"errors", "jsonl", "yamlload", "atomic"},
    "outputs": {"errors"},
    "yamlload": {"errors"},
    "cachedir": set(),
    "hub": {"errors"},
    "runlock": {"errors"},
    "ranks": set(),
    "stopping": {"errors"},
    "judge": {"errors", "trajectory", "credentials", "yamlload", "stopping"},
    "tokens": {"errors", "trajectory", "algos"},
    "env": {"errors", "trajectory", "judge", "cachedir", "yamlload", "stopping"},
    "policy": {"errors", "trajectory", "credentials", "seeds"},
    "learn": {"errors", "trajectory", "algos", "tokens", "judge", "rundir", "stopping"},
    "rollout": {
        "errors",
        "trajectory",
        "judge",
        "env",
        "policy",
        "tokens",
        "seeds",
        "outputs",
        "stopping",
        "atomic",
    },
    "eval": {"errors", "trajectory", "rundir", "judge", "env", "rollout", "seeds"},
    "sampling": {
        "errors",
        "trajectory",
        "rundir",
        "ranks",
        "tokens",
        "env",
        "policy",
        "learn",
        "rollout",
        "stopping",
    },
    "train": {
        "eval",
        "sampling",
        "ranks",
        "errors",
        "trajectory",
        "algos",
        "rundir",
        "judge",
        "tokens",
        "env",
        "policy",
        "learn",
        "rollout",
        "seeds",
        "outputs",
        "yamlload",
        "hub",
        "runlock",
        "stopping",
    },
    "replay": {
        "errors",
        "jsonl",
        "trajectory",
        "rundir",
        "judge",
        "tokens",
        "env",
        "policy",
        "learn",
        "rollout",
        "outputs",
        "atomic",
    },
    # eval: the run report shows the research shares of agentrl.eval.research, their one
    # implementation (a downward arrow, layer 5 → 3.5; agentrl eval's scorecards show the same)
    "explain": {"errors", "trajectory", "algos", "rundir", "tokens", "yamlload", "eval", "atomic"},
    "integrations": {
        "errors",
        "trajectory",
        "judge",
        "tokens",
        "env",
        "rollout",
        "seeds",
        "outputs",
        "yamlload",
    },
    "cli": set(LAYERS) - {"cli"} | {""},
}


def _module_name(path: Path, root: Path = PKG) -> str:
    parts = ["agentrl", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str, modules: set[str]):
    """(imported agentrl module, line) for every import in ``path``: top level, inside functions and
    under ``TYPE_CHECKING`` alike; relative imports resolved; ``from P import m`` names the module
    ``P.m`` when that is a module, else ``P``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "agentrl":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "agentrl":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in modules else base), node.lineno


def module_graph(root: Path = PKG) -> tuple[dict[str, set[str]], dict[tuple[str, str], str]]:
    """The import graph of every module under ``root``: module → the agentrl modules it imports, and
    for each arrow the ``file:line`` of its first import."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in files}
    where: dict[tuple[str, str], str] = {}
    for m, path in files.items():
        for target, lineno in _imports(path, m, set(files)):
            if target != m:
                graph[m].add(target)
                where.setdefault((m, target), f"{path.relative_to(root.parent)}:{lineno}")
    return graph, where


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return [*path[path.index(n) :], n]
            if n in graph and n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def _package(module: str) -> str:
    """The top-level package of ``agentrl.X...`` (``""`` for ``agentrl`` itself); an entry point
    (``__main__``) counts as the CLI, which it is."""
    parts = module.split(".")
    return "cli" if parts[-1] == "__main__" else (parts[1] if len(parts) > 1 else "")


def forbidden_arrows(graph: dict[str, set[str]], where: dict[tuple[str, str], str]) -> list[str]:
    """Every module-level arrow whose package-to-package arrow is not in ``ALLOWED``."""
    problems = []
    for m, targets in graph.items():
        own = _package(m)
        for t in sorted(targets):
            other = _package(t)
            if other != own and own in ALLOWED and other not in ALLOWED[own]:
                problems.append(f"{where[m, t]}: {own} → {other} ({m} imports {t}) is not an allowed arrow")
    return problems


def test_every_package_is_declared():
    graph, _ = module_graph()
    packages = {_package(m) for m in graph} - {""}
    assert packages <= set(ALLOWED), (
        f"packages missing from ALLOWED/LAYERS: {sorted(packages - set(ALLOWED))}"
    )
    assert set(ALLOWED) == set(LAYERS)


def test_allowed_arrows_go_down_the_layers():
    """The allow-list itself obeys DESIGN.md's layers: no arrow sideways or up."""
    bad = [
        f"{a} (layer {LAYERS[a]}) → {b} (layer {LAYERS[b]})"
        for a, targets in ALLOWED.items()
        for b in targets
        if b and LAYERS[b] >= LAYERS[a]
    ]
    assert not bad, "\n".join(bad)


def test_no_forbidden_arrow():
    """Every import, at any depth (inside functions and TYPE_CHECKING blocks too), follows ALLOWED."""
    problems = forbidden_arrows(*module_graph())
    assert not problems, "\n".join(problems)


def test_no_import_cycle():
    """No module imports itself through others, lazily or not (a lazy import that dodges a circle
    is still a circle)."""
    graph, where = module_graph()
    cycle = find_cycle(graph)
    assert cycle is None, (
        "import cycle: "
        + " → ".join(f"{a} ({where[a, b]})" for a, b in itertools.pairwise(cycle))
        + f" → {cycle[-1]}"
    )


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        f = root / "agentrl" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return root / "agentrl"


def test_checker_finds_a_lazy_forbidden_arrow_and_a_cycle(tmp_path):
    """The checks have teeth: a replay function importing train, and a two-module circle through a
    function-level import, are both reported with the offending file and line."""
    pkg = _write(
        tmp_path,
        {
            "__init__.py": "",
            "train/__init__.py": "",
            "train/update.py": "",
            "replay/__init__.py": "",
            "replay/tensors.py": "def f():\n    from agentrl.train.update import g\n",
            "env/__init__.py": "",
            "env/suite.py": "from agentrl.env import sandbox\n",
            "env/sandbox.py": "def h():\n    from .suite import x\n",
        },
    )
    graph, where = module_graph(pkg)
    problems = forbidden_arrows(graph, where)
    assert problems == [
        "agentrl/replay/tensors.py:2: replay → train (agentrl.replay.tensors imports agentrl.train.update) "
        "is not an allowed arrow"
    ]
    assert find_cycle(graph) == ["agentrl.env.sandbox", "agentrl.env.suite", "agentrl.env.sandbox"]


def test_algos_imports_no_model_library():
    for path in (PKG / "algos").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for module in names:
                assert module.split(".")[0] not in {"transformers", "vllm", "peft"}, f"{path}:{node.lineno}"


PUBLIC = [
    "agentrl",
    "agentrl.errors",
    "agentrl.jsonl",
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
    "agentrl.learn",
    "agentrl.rundir",
    "agentrl.outputs",
    "agentrl.yamlload",
    "agentrl.cachedir",
    "agentrl.sampling",
    "agentrl.ranks",
    "agentrl.tokens",
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


def _parsers(parser):
    """``parser`` and every sub-command's parser under it, depth first."""
    import argparse

    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases share one parser
                yield from _parsers(sub)


def test_every_help_text_prints_as_written():
    """argparse %-formats help strings but prints descriptions as they are: a ``%%`` written into a
    description shows as "95%%" (as ``agentrl eval --help`` once did), and a lone ``%`` in a help
    string crashes ``--help``. Every parser's help is rendered here."""
    from agentrl.cli import build_parser

    seen = 0
    for p in _parsers(build_parser()):
        text = p.format_help()  # raises on a help string's bad % format
        assert "%%" not in text, p.prog
        seen += 1
    assert seen > 10
