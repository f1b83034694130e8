"""Every code block of README.md and docs/*.md runs (``tests/docs/snippets.py`` says how), so the docs cannot rot.

One test per markdown file: its blocks run in order in one fresh directory holding copies of the
repo's ``examples/``, ``rubrics/`` and ``envs/`` (a command that writes ``runs/x`` writes it there),
its Python blocks share one namespace, and ``agentrl`` on the PATH is this checkout's CLI.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.given import GIVEN, stop_servers
from tests.docs.snippets import ROOT, Block, blocks, commands, doc_files, is_install

FILES = doc_files()
COPIED = ("examples", "rubrics", "envs")


def _check_yaml(block: Block) -> None:
    """A YAML block with ``check as="rubric|env|train"`` parses and validates as one."""
    import yaml

    data = yaml.safe_load(block.source())
    kind = block.first("check").attrs["as"]  # type: ignore[union-attr]
    if kind == "rubric":
        from agentrl.judge import parse_rubric

        parse_rubric(data, source=block.where)
    elif kind == "env":
        from agentrl.env.config import EnvConfig

        EnvConfig.model_validate(data)
    else:
        from agentrl.train import TrainConfig

        TrainConfig.model_validate(data)


CHECKS = ("rubric", "env", "train")


def runnable(block: Block) -> list[str]:
    """The commands of a shell or console block that run: not install lines, not ``skip-command`` ones."""
    skips = [d.attrs["match"] for d in block.all("skip-command")]
    return [c for c in commands(block) if not is_install(c) and not any(m in c for m in skips)]


def test_markers_are_valid_and_none_is_stale():
    """Markers parse (known verb, every skip with a reason), every ``skip-command`` matches a command,
    every ``given`` name exists, and no Python block is skipped without saying why."""
    problems = []
    for path in FILES:
        for b in blocks(path):  # raises MarkerError on a bad marker
            for d in b.all("check"):
                if b.lang.lower() not in ("yaml", "yml") or d.attrs["as"] not in CHECKS:
                    problems.append(f"{b.where}: check as={d.attrs['as']!r} on a {b.lang or 'plain'} block")
            if b.kind is None and b.directives:
                problems.append(f"{b.where}: a marker on a {b.lang or 'plain'} block, which never runs")
            if b.kind is None and b.text.lstrip().startswith("$ "):
                problems.append(f"{b.where}: a transcript: tag it ```console so that its commands run")
            for d in b.all("skip-command"):
                if b.kind in (None, "python") or not any(d.attrs["match"] in c for c in commands(b)):
                    problems.append(f"{b.where}: skip-command match={d.attrs['match']!r} matches no command")
            problems += [
                f"{b.where}: given {n!r} is not in tests/docs/given.py" for n in b.given() if n not in GIVEN
            ]
            b.source()  # every replace must match
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="session")
def template(tmp_path_factory) -> Path:
    """A working directory with copies of the repo's example inputs and a ``bin/`` whose ``agentrl``
    and ``python`` are this interpreter with this checkout on the path."""
    root = tmp_path_factory.mktemp("doc-template")
    for name in COPIED:
        shutil.copytree(ROOT / name, root / name)
    bin_dir = root / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "agentrl"
    shim.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -c "import sys; from agentrl.cli import main; sys.exit(main())" "$@"\n'
    )
    shim.chmod(0o755)
    # A script, not a symlink: a symlinked virtualenv python elsewhere does not find its pyvenv.cfg
    # and runs without the venv's packages (the snippets' fake judge server then never started).
    py = bin_dir / "python"
    py.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    return root


_SHELL = re.compile(r"[|;<>&`$(){}*?]")


def in_process(cmds: list[str]) -> list[list[str]] | None:
    """The argv of each ``agentrl`` command when every command is one with no shell syntax beyond
    ``&&`` (run in this process: torch is imported once, not once a command); else None."""
    argvs = []
    for cmd in cmds:
        for part in cmd.split(" && "):
            if _SHELL.search(part) or not part.startswith("agentrl "):
                return None
            argvs.append(shlex.split(part)[1:])
    return argvs


def _run_agentrl(block: Block, argvs: list[list[str]]) -> str:
    from agentrl.cli import main

    printed = []
    for argv in argvs:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as e:  # argparse
                rc = e.code
        assert rc in (0, None), (
            f"{block.where}: exit {rc} running agentrl {shlex.join(argv)}\n"
            f"stdout:\n{out.getvalue()[-3000:]}\nstderr:\n{err.getvalue()[-3000:]}"
        )
        printed.append(out.getvalue())
    return "".join(printed)


def _run_shell(block: Block, cwd: Path, bin_dir: Path) -> None:
    cmds = runnable(block)
    if not cmds:
        return
    argvs = in_process(cmds)
    if argvs is not None:
        _check_console(block, _run_agentrl(block, argvs))
        return
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "OMP_NUM_THREADS": "1",
    }
    script = "set -euo pipefail\n" + "\n".join(cmds) + "\n"
    p = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (
        f"{block.where}: exit {p.returncode} running\n{script}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    )
    _check_console(block, p.stdout)


def _check_console(block: Block, stdout: str) -> None:
    if block.kind == "console":  # the sample output shown must be what the commands print
        printed = {line.strip() for line in stdout.splitlines()}
        shown = [
            ln.strip() for ln in block.source().splitlines() if ln.strip() and not ln.startswith(("$ ", " "))
        ]
        missing = [ln for ln in shown if ln not in printed and ln != "..."]
        assert not missing, f"{block.where}: shown but not printed:\n" + "\n".join(missing)


def _run_python(block: Block, namespace: dict) -> None:
    for name in block.given():
        namespace.setdefault(name, GIVEN[name]())
    code = compile(block.source({n: namespace[n] for n in block.given()}), block.where, "exec")
    exec(code, namespace)  # a failure's traceback names README.md:LINE / docs/x.md:LINE


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_doc_snippets_run(path, template, tmp_path, monkeypatch):
    work = tmp_path / "work"
    shutil.copytree(template, work, symlinks=True)
    monkeypatch.chdir(work)
    namespace: dict = {"__name__": "__docs__"}
    try:
        for block in blocks(path):
            if block.kind is None or block.first("skip"):
                continue
            if block.kind == "python":
                _run_python(block, namespace)
            elif block.kind == "yaml":
                _check_yaml(block)
            else:
                _run_shell(block, work, work / ".bin")
    finally:
        stop_servers()
