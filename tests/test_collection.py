"""The suite's pytest options: a module that fails to import is reported, and the rest still runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_broken_module_is_reported_and_the_rest_runs(tmp_path):
    (tmp_path / "test_a_broken.py").write_text("import no_such_module_a\n\ndef test_a():\n    pass\n")
    (tmp_path / "test_b_fine.py").write_text("def test_b():\n    assert True\n")
    (tmp_path / "test_c_broken.py").write_text("import no_such_module_c\n\ndef test_c():\n    pass\n")
    cmd = [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path)]
    cmd += ["-p", "no:cacheprovider", str(tmp_path)]
    env = {**os.environ, "AGENTRL_DEPS_CHECK": "off"}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    out = done.stdout
    assert done.returncode != 0, out  # .ci/run fails on it
    assert "no_such_module_a" in out and "no_such_module_c" in out  # both, not just the first
    assert "1 passed, 2 errors" in out  # and the good module ran
