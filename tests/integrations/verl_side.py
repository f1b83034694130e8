"""verl for the tests, without its dependencies, in a side directory.

verl does not co-install with this repository's pins (verl 0.9 wants ``transformers<5.11``, older
releases ``numpy<2``), but the modules the adapter touches import with what is installed here plus
a few small packages. ``ensure_verl()`` installs exactly those with ``pip install --no-deps
--target`` once (into ``$AGENTRL_TEST_CACHE/verl-side``, a directory per pins), puts the directory
first on ``sys.path`` and returns it; where verl is already importable it does nothing. When pip
cannot reach the registry the caller's module is skipped with the reason.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# verl itself, and what the agent loop (tensordict, hydra, the rollout server's fastapi/uvicorn) and
# the trainer's advantage code (torchdata, TransferQueue; orjson through verl.utils.tracking) import
# that a fresh virtualenv with agentrl[dev] lacks — found by importing the tests' modules in one,
# and checked on every run by tests/deps_check.py (a package imported but declared nowhere fails it).
# hydra 1.3 needs its own antlr4 runtime.
PINS = (
    "verl==0.9.1",
    "tensordict>=0.8,<=0.10,!=0.9.0",
    "pyvers>=0.1,<0.2",
    "hydra-core==1.3.8",
    "antlr4-python3-runtime==4.9.3",
    "codetiming",
    "cachetools",
    "uvicorn",
    "fastapi>=0.115,<0.116",
    "starlette>=0.40,<0.47",
    "torchdata",
    "TransferQueue>=0.1.10",
    "pyzmq",
    "msgspec",
    "orjson",
)
PROBE = ("verl.experimental.agent_loop.agent_loop", "verl.trainer.ppo.ray_trainer", "hydra.utils")


def _importable() -> bool:
    try:
        for m in PROBE:
            importlib.import_module(m)
    except ImportError:
        return False
    return True


def ensure_verl() -> Path | None:
    """verl's agent loop and trainer importable (None: they already were), or ``pytest.skip``."""
    if _importable():
        return None
    base = Path(os.environ.get("AGENTRL_TEST_CACHE") or tempfile.gettempdir())
    key = hashlib.sha256(f"{sys.version_info[:2]}|{'|'.join(PINS)}".encode()).hexdigest()[:12]
    side = base / f"verl-side-{key}"
    base.mkdir(parents=True, exist_ok=True)
    with open(base / f"verl-side-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install even with parallel test processes
        if not (side / ".complete").exists():
            tmp = Path(tempfile.mkdtemp(prefix="verl-side-", dir=base))
            t0 = time.perf_counter()
            cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            cmd += ["--no-deps", "--timeout", "20", "--retries", "1", "--target", str(tmp), *PINS]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                why = (done.stderr.strip().splitlines() or ["no output"])[-1]
                pytest.skip(
                    f"cannot install verl without its dependencies (pip: {why})", allow_module_level=True
                )
            (tmp / ".complete").write_text(f"{time.perf_counter() - t0:.1f} s\n")
            shutil.rmtree(side, ignore_errors=True)
            tmp.rename(side)
    if str(side) not in sys.path:
        sys.path.insert(0, str(side))
    importlib.invalidate_caches()
    for m in PROBE:  # installed, so an import error here is a real incompatibility: fail loudly
        try:
            importlib.import_module(m)
        except ModuleNotFoundError as e:
            raise ImportError(
                f"{m} needs {e.name!r}, which neither agentrl[dev] nor the side-install provides: "
                f"add its package to PINS in {__file__}"
            ) from e
    return side
