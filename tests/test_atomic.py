"""``agentrl.atomic.write_atomic``, the one atomic write: every durable file written whole goes through
it, fsynced before the rename, and a failed write leaves the old file and no temporary one."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from agentrl.atomic import temporary_name, write_atomic

ROOT = Path(__file__).resolve().parents[1]


def test_bytes_or_chunks_are_synced_then_renamed_over_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "deep" / "summary.json"
    synced: list[bytes] = []
    real = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (real(fd), synced.append(temporary_name(target).read_bytes()))
    )
    assert write_atomic(target, b"old") == target and target.read_bytes() == b"old"
    write_atomic(target, iter([b"n", b"ew"]))
    assert target.read_bytes() == b"new" and synced == [b"old", b"new"]  # synced before each rename
    assert sorted(p.name for p in target.parent.iterdir()) == ["summary.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "trajectories.jsonl"
    write_atomic(target, b"kept\n")

    def chunks():
        yield b"half a "
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_atomic(target, chunks())
    assert target.read_bytes() == b"kept\n" and not temporary_name(target).exists()
    assert [p.name for p in tmp_path.iterdir()] == ["trajectories.jsonl"]


def test_no_other_module_renames_a_temporary_file_over_a_durable_one():
    """Whole files are written by ``write_atomic`` alone (a run's JSON and metrics, trajectory files,
    a rollout's params, replay's tensors, the report); the directories written then renamed whole
    (a checkpoint, an imported model, a built sandbox) are the exceptions, listed here."""
    directories = {"agentrl/train/checkpoint.py", "agentrl/learn/gguf.py", "agentrl/env/sandbox/__init__.py"}
    found = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "agentrl").rglob("*.py")
        if re.search(r"os\.replace\(|\.rename\(|tmp\.replace\(", p.read_text(encoding="utf-8"))
    }
    assert found == directories | {"agentrl/atomic.py"}
