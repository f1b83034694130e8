"""``agentrl sandbox build`` is bounded, shows its progress, and a killed build leaves nothing.

- ``--companies`` over ``MAX_COMPANIES`` is one line naming the flag, at once, with no directory
  created (``--companies 100000000`` ran 10+ minutes with no output).
- It did not end for some sizes at all: from the 51st company of seed 0, a segment figure so small
  that every "analyst preview" printed the same as the figure itself kept ``_distinct`` drawing
  forever. 200 companies now build, with a progress line every tenth, and the worlds that built
  before are byte for byte the same (their digest, taken on the code before the fix).
- A build killed while it generates leaves no directory behind (it was created first, empty).
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentrl.env.sandbox import GENERATOR_VERSION, MAX_COMPANIES, build
from agentrl.env.sandbox.world import _distinct, money
from agentrl.errors import ConfigError
from tests.robustness.cli_run import agentrl

ROOT = Path(__file__).resolve().parents[2]
# sha256 of corpus.jsonl + tasks.jsonl of build(seed=0, companies=50) by generator version: v3 on the
# generator before the fix; v4 (demonstrations written to be copied) pinned when it landed; v5 adds
# each single-source task's follow-up query (the corpus is unchanged), so a later change that alters
# worlds without a new GENERATOR_VERSION fails here.
SEED0_C50 = {
    3: "9664ebff5c0d48a0057da31bad94c98a12a30f6d5a2c20be73123c465c43353d",
    4: "0c3bcdbbeb28f185dd82866e84275110a596eb73b892dc03ad03e6fc68b84b04",
    5: "f412d7a8ece354c266898c6dd1a6367b1560f4b12eaebed88a757de0677837b1",
}


def test_too_many_companies_is_one_line_at_once(capsys, tmp_path):
    out = tmp_path / "sb"
    t0 = time.perf_counter()
    rc, err = agentrl(capsys, "sandbox", "build", "--companies", "100000000", "--out", out)
    assert rc == 1 and len(err) == 1, err
    assert err[0].startswith(f"agentrl sandbox: error: --companies 100000000: at most {MAX_COMPANIES}")
    assert time.perf_counter() - t0 < 5 and not out.exists()
    with pytest.raises(
        ConfigError, match=rf"companies: {MAX_COMPANIES + 1} is over the cap of {MAX_COMPANIES}"
    ):
        build(tmp_path / "lib", companies=MAX_COMPANIES + 1)
    assert not (tmp_path / "lib").exists()


@pytest.mark.timeout(120)  # before the fix: never ended
def test_200_companies_build_with_progress_lines(tmp_path):
    out = tmp_path / "sb"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "agentrl", "sandbox", "build", "--companies", "200", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=110)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [line for line in p.stderr.splitlines() if line.startswith("sandbox build: ")]
    assert [line.split()[2] for line in lines] == [f"{k * 20}/200" for k in range(1, 11)], p.stderr
    assert (out / "tasks.jsonl").read_text().count("\n") == 200 * 11


def test_worlds_that_built_before_are_unchanged(tmp_path):
    build(tmp_path, seed=0, companies=50)
    digest = hashlib.sha256(
        (tmp_path / "corpus.jsonl").read_bytes() + (tmp_path / "tasks.jsonl").read_bytes()
    )
    assert digest.hexdigest() == SEED0_C50[GENERATOR_VERSION]


def _old_distinct(
    rng: random.Random, actual: float, lo: float, hi: float, tries: int = 10_000
) -> float | None:
    """The preview generator before the fix, cut off after ``tries`` draws (None: it never ended)."""
    for _ in range(tries):
        v = round(actual * (1 + rng.choice((-1, 1)) * rng.uniform(lo, hi)), 1)
        if money(v) != money(actual) and v > 0:
            return v
    return None


@settings(max_examples=300, deadline=None)
@given(
    actual=st.one_of(st.integers(1, 600).map(lambda t: t / 10), st.floats(0.01, 300)),
    band=st.sampled_from([(0.03, 0.12), (0.04, 0.15), (0.03, 0.1)]),
    seed=st.integers(0, 2**32 - 1),
)
@example(actual=0.2, band=(0.04, 0.15), seed=0)  # no draw can print differently (the hang)
@example(actual=0.5, band=(0.03, 0.1), seed=0)  # only the band's upper edge prints 0.6
@example(actual=0.26, band=(0.04, 0.15), seed=0)  # only the lower side can print differently
def test_the_preview_draws_as_before_wherever_that_ended(actual, band, seed):
    new_rng, old_rng = random.Random(seed), random.Random(seed)
    new = _distinct(new_rng, actual, *band)
    old = _old_distinct(old_rng, actual, *band)
    assert money(new) != money(actual) and new > 0
    if old is not None:  # it ended before: the same value, from the same draws
        assert new == old and new_rng.getstate() == old_rng.getstate()


def test_a_build_killed_while_it_generates_leaves_no_directory(tmp_path):
    out = tmp_path / "sb"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "agentrl", "sandbox", "build", "--companies", "2000", "--out", str(out)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(p.stderr or []), daemon=True)
    reader.start()
    try:
        # until generation is under way (its first progress line), or the directory shows up early
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not out.exists() and not lines and p.poll() is None:
            time.sleep(0.05)
        assert p.poll() is None, "the build ended before it could be killed"
        assert not out.exists(), "the output directory exists while the world is still being generated"
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.kill()
        p.wait(30)
    assert not out.exists()
