"""Suite-wide test settings.

Hypothesis explores new random examples on every local run (and keeps the failures it finds in
.hypothesis/); under CI (``CI=true``) it runs derandomized, so a submission's result does not
depend on the luck of the draw.
"""

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


# At the end of a session: fail when a test imported a package that nothing declares (tests/deps_check.py).
pytest_plugins = ["tests.deps_check"]

_CACHE_VARS = ("AGENTRL_TEST_CACHE", "AGENTRL_CACHE", "XDG_CACHE_HOME")
_CREATED = pytest.StashKey[tuple[str, dict[str, str | None]]]()


def pytest_configure(config):
    """Caches go to a directory of this test session, never the user's ~/.cache: agentrl's one cache
    root (``AGENTRL_CACHE``: sandboxes, indexes, the judge's verdicts) and every other XDG cache;
    subprocesses inherit it. Tests that need a cache of their own still pass their own paths."""
    import tempfile

    os.environ.pop("AGENTRL_CACHE_DIR", None)  # the deprecated alias would only add a note
    if "AGENTRL_TEST_CACHE" not in os.environ:
        before = {k: os.environ.get(k) for k in _CACHE_VARS}
        base = tempfile.mkdtemp(prefix="agentrl-test-cache-")
        os.environ["AGENTRL_TEST_CACHE"] = base
        os.environ["AGENTRL_CACHE"] = os.path.join(base, "agentrl")
        os.environ["XDG_CACHE_HOME"] = os.path.join(base, "xdg")
        config.stash[_CREATED] = (base, before)


def pytest_unconfigure(config):
    """Remove the session's cache directory and restore the variables, only where this session made
    them: a pytest run inside a test (or an xdist worker) inherits the directory and leaves it be."""
    import shutil

    created = config.stash.get(_CREATED, None)
    if created is None:
        return
    base, before = created
    shutil.rmtree(base, ignore_errors=True)
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    del config.stash[_CREATED]


def pytest_report_header(config):
    """The kernel set and threads this session's torch runs with, so a log says which it tested
    (``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2`` forces the AVX2 set on any x86)."""
    try:
        import torch
    except ImportError:
        return "torch: not installed"
    return (
        f"torch {torch.__version__}: CPU kernels {torch.backends.cpu.get_cpu_capability()}, "
        f"{torch.get_num_threads()} intra-op threads"
        f" (ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', 'unset')},"
        f" OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})"
    )
