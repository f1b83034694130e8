"""Output paths are checked before any work starts, and OS errors reach the user as one line.

Every command with an output flag refuses a directory, a device (``/dev/zero``, ``/dev/full``),
a path under ``/proc``, a path below a file and a read-only directory, as one line naming the
flag and the path, exit code 1, leaving nothing behind; an OS error later on (a full disk) names
the path and the reason; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.outputs import check_output_file, naming, torch_save
from tests.robustness.cli_run import agentrl, build_tiny_suite

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    return build_tiny_suite(tmp_path_factory)


@pytest.fixture
def inputs(tmp_path) -> dict[str, Path]:
    """Input files that exist (the checks under test come before anything reads them)."""
    traj = tmp_path / "in" / "t.jsonl"
    traj.parent.mkdir()
    traj.write_text("")
    rubric = tmp_path / "in" / "r.yaml"
    rubric.write_text("id: r\ncriteria: []\n")
    return {"traj": traj, "rubric": rubric, "run": tmp_path / "in"}


def _commands(i: dict[str, Path], out: Path, suite: Path) -> dict[str, list[str | Path]]:
    return {
        "rollout --out": ["rollout", "--suite", suite, "--out", out, "--no-progress"],
        "judge --out": ["judge", i["traj"], "--rubric", i["rubric"], "--out", out, "--no-cache"],
        "replay --out": ["replay", i["traj"], "--rubric", i["rubric"], "--out", out],
        "replay --tensors": ["replay", i["traj"], "--tensors", out],
        "report -o": ["report", i["run"], "-o", out],
        "sandbox build --out": ["sandbox", "build", "--companies", "1", "--out", out],
    }


COMMANDS = list(_commands({"traj": Path(), "rubric": Path(), "run": Path()}, Path(), Path()))


def _refused(capsys, argv, flag: str, path, why: str) -> None:
    rc, err = agentrl(capsys, *argv)
    assert rc == 1, err
    assert len(err) == 1, err
    assert f"error: {flag} {path}: " in err[0] and why in err[0], err[0]


BAD_FILES = [
    ("/dev/zero", "is a character device, not a regular file"),
    ("/dev/full", "is a character device, not a regular file"),
    ("/proc/x.jsonl", "kernel pseudo-filesystem"),
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("path", "why"), BAD_FILES, ids=["dev-zero", "dev-full", "proc"])
def test_device_and_proc_outputs_are_refused(capsys, inputs, tiny_suite, command, path, why):
    if command == "sandbox build --out":
        why = why.replace("not a regular file", "not a directory")
    argv = _commands(inputs, Path(path), tiny_suite)[command]
    _refused(capsys, argv, command.split()[-1], path, why)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "sandbox build --out"])
def test_a_directory_or_a_path_below_a_file_is_refused(capsys, inputs, tiny_suite, tmp_path, command):
    flag = command.split()[-1]
    d = tmp_path / "a-dir"
    d.mkdir()
    _refused(capsys, _commands(inputs, d, tiny_suite)[command], flag, d, "is a directory, not a regular file")
    below = inputs["traj"] / "x.out"
    _refused(capsys, _commands(inputs, below, tiny_suite)[command], flag, below, "Not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir", "in"]


def test_sandbox_build_into_an_existing_file_is_refused(capsys, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# notes\n")
    rc, err = agentrl(capsys, "sandbox", "build", "--companies", "1", "--out", readme)
    assert rc == 1 and len(err) == 1
    assert f"--out {readme}: is an existing file, not a directory" in err[0]
    assert readme.read_text() == "# notes\n"


@pytest.fixture
def readonly(tmp_path, monkeypatch):
    """A directory nobody may write to: chmod 0o500, or, as root (who ignores the mode bits), a
    directory that ``os.access`` reports read-only."""
    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() == 0:
        real = os.access

        def access(path, mode, *args, **kwargs):
            if Path(path).absolute() == d and mode & os.W_OK:
                return False
            return real(path, mode, *args, **kwargs)

        monkeypatch.setattr(os, "access", access)
    else:
        d.chmod(0o500)
    yield d
    d.chmod(0o700)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("where", ["in", "below"])
def test_a_read_only_directory_is_refused_before_any_work(
    capsys, inputs, tiny_suite, readonly, command, where
):
    out = readonly / "out.x" if where == "in" else readonly / "new" / "deeper" / "out.x"
    _refused(capsys, _commands(inputs, out, tiny_suite)[command], command.split()[-1], out, "is not writable")
    assert list(readonly.iterdir()) == []


def test_an_existing_output_that_cannot_be_written_is_refused(capsys, tmp_path, tiny_suite, monkeypatch):
    out = tmp_path / "t.jsonl"
    out.write_text("")
    real = os.open

    def deny(path, flags, *args, **kwargs):  # what a read-only file gives a non-root user
        if Path(path) == out and flags & os.O_WRONLY:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    rc, err = agentrl(capsys, "rollout", "--suite", tiny_suite, "--out", out, "--no-progress")
    assert rc == 1 and err == [f"agentrl rollout: error: --out {out}: cannot write to it: Permission denied"]


def _fsync_fails_for(path: Path, monkeypatch) -> None:
    """``os.fsync`` of ``path`` raises ENOSPC, as a full disk does (other files sync normally)."""
    real = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}") == str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_a_full_disk_during_rollout_is_one_line_naming_the_output(capsys, tmp_path, tiny_suite, monkeypatch):
    out = tmp_path / "r" / "t.jsonl"
    _fsync_fails_for(out, monkeypatch)
    argv = ["rollout", "--suite", tiny_suite, "--out", out, "--limit", "2", "--no-progress"]
    rc, err = agentrl(capsys, *argv)
    assert rc == 1
    assert err == [f"agentrl rollout: error: {out}: No space left on device (ENOSPC)"]
    out.unlink()  # a fresh run (the failed one may have written its lines before the failed fsync)
    with pytest.raises(OSError, match="No space left") as e:
        agentrl(capsys, "--debug", *argv)
    assert e.value.filename == str(out) and e.value.errno == errno.ENOSPC


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            PermissionError(errno.EACCES, "Permission denied", "/r/metrics.jsonl"),
            "/r/metrics.jsonl: Permission denied (EACCES)",
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "/r/report.html"),
            "/r/report.html: Read-only file system (EROFS)",
        ),
        (
            FileNotFoundError(errno.ENOENT, "No such file or directory", "/r/a", None, "/r/b"),
            "/r/a -> /r/b: No such file or directory (ENOENT)",
        ),
        (OSError(errno.EMFILE, "Too many open files"), "Too many open files (EMFILE)"),
    ],
    ids=["EACCES", "EROFS", "ENOENT-rename", "unnamed"],
)
def test_any_os_error_of_a_command_is_one_line(capsys, tmp_path, monkeypatch, error, line):
    import agentrl.explain.report as report

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(report, "write_report", fail)
    rc, err = agentrl(capsys, "report", tmp_path, "-o", tmp_path / "r.html")
    assert rc == 1 and err == [f"agentrl report: error: {line}"]
    with pytest.raises(type(error)):
        agentrl(capsys, "--debug", "report", tmp_path, "-o", tmp_path / "r.html")


def test_torch_save_on_a_full_disk_is_an_os_error_naming_the_file():
    torch = pytest.importorskip("torch")
    with pytest.raises(OSError) as e:
        torch_save({"w": torch.zeros(4096)}, "/dev/full")
    assert e.value.errno == errno.ENOSPC and e.value.filename == "/dev/full"


def test_torch_save_turns_an_inline_container_failure_into_an_os_error(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")

    def save(obj, f):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", save)
    path = tmp_path / "state.pt"
    with pytest.raises(OSError) as e:
        torch_save({}, path)
    assert e.value.filename == str(path) and "inline_container" in e.value.strerror
    monkeypatch.setattr(torch, "save", lambda obj, f: (_ for _ in ()).throw(RuntimeError("other")))
    with pytest.raises(RuntimeError, match="other"):  # not a write failure: left alone
        torch_save({}, path)


def test_replay_tensors_on_a_full_disk_names_the_file(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from agentrl.replay import save_tensors

    def fsync(fd):  # a full disk, where the atomic write meets it: the data reaching the disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    out = tmp_path / "b.pt"
    with pytest.raises(OSError) as e:
        save_tensors({"x": torch.zeros(2)}, out)
    assert e.value.filename == str(out) and e.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # neither the file nor the temporary one is left


def test_naming_leaves_named_and_non_write_errors_alone(tmp_path):
    with pytest.raises(ConnectionRefusedError) as e, naming(tmp_path / "x"):
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    assert e.value.filename is None
    with pytest.raises(OSError) as e, naming(tmp_path / "x"):
        raise OSError(errno.ENOSPC, "No space left on device", "/elsewhere")
    assert e.value.filename == "/elsewhere"


def test_the_check_creates_nothing_and_accepts_a_new_nested_path(tmp_path):
    out = tmp_path / "a" / "b" / "t.jsonl"
    assert check_output_file(out) == out
    assert list(tmp_path.iterdir()) == []
    existing = tmp_path / "t.jsonl"
    existing.write_text("keep\n")
    check_output_file(existing)
    assert existing.read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


_BOUNDED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
{body}
"""


def _bounded(body: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    code = _BOUNDED.format(body=body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)


def test_rollout_into_dev_zero_exits_at_once_without_reading_it(tiny_suite):
    """Under a 2 GB address-space limit: the CLI refuses /dev/zero in one line, and the library's
    resume path (``plan_episodes``) refuses it too rather than reading it whole."""
    t0 = time.monotonic()
    r = _bounded(
        "from agentrl.cli import main\n"
        f"sys.exit(main(['rollout', '--suite', {str(tiny_suite)!r}, '--out', '/dev/zero', '--no-progress']))"
    )
    assert time.monotonic() - t0 < 30
    assert r.returncode == 1, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [
        "agentrl rollout: error: --out /dev/zero: is a character device, not a regular file; give a file path"
    ]
    r = _bounded(
        "from pathlib import Path\n"
        "from agentrl.env.suite import load_suite\n"
        "from agentrl.errors import ConfigError\n"
        "from agentrl.rollout.runner import plan_episodes\n"
        "try:\n"
        f"    plan_episodes(load_suite({str(tiny_suite)!r}).tasks, Path('/dev/zero'), 1, None, None)\n"
        "except ConfigError as e:\n"
        "    print(e); sys.exit(3)\n"
    )
    assert r.returncode == 3, r.stderr[-2000:]
    assert r.stdout.strip() == "/dev/zero: not a regular file; a rollout writes (and resumes) a JSONL file"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--out", "/dev/zero"], "--out /dev/zero: is a character device"),
        (["--out", "x.parquet", "--limit", "-3"], "argument --limit: must be an integer >= 1, got -3"),
    ],
)
def test_task_data_refuses_a_bad_output_or_limit(capsys, tmp_path, monkeypatch, extra, message):
    from agentrl.integrations.task_data import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["--engine", "verl", *extra])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("python -m")]
    assert e.value.code == 2 and len(err) == 1 and message in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["judge", "replay"])
def test_a_full_disk_while_writing_judged_or_replayed_trajectories_names_the_output(
    capsys, tmp_path, tiny_suite, monkeypatch, command
):
    src = tmp_path / "t.jsonl"
    assert (
        agentrl(capsys, "rollout", "--suite", tiny_suite, "--out", src, "--limit", "2", "--no-progress")[0]
        == 0
    )
    out = tmp_path / "out" / "j.jsonl"
    real = os.fsync

    def fsync(fd):  # the atomic writer's temporary beside the output fills the disk
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(out.parent / f".{out.name}.tmp")):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    argv = {
        "judge": ["judge", src, "--out", out, "--no-cache"],
        "replay": [
            "replay",
            src,
            "--rubric",
            ROOT / "rubrics" / "alphabet-2025-q1-cloud-offline.yaml",
            "--out",
            out,
        ],
    }[command]
    rc, err = agentrl(capsys, *argv)
    assert rc == 1 and err[-1] == f"agentrl {command}: error: {out}: No space left on device (ENOSPC)"
    assert len([e for e in err if "error:" in e]) == 1
    assert not out.exists()
