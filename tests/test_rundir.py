"""The run directory's one owner, ``agentrl.rundir``: names, step files, checkpoints, tolerant readers."""

import json
import subprocess
import sys

import numpy as np
import pytest

from agentrl.errors import ConfigError, TornLineWarning
from agentrl.rundir import RunDir, checkpoint_state_file, read_jsonl, step_name, step_number


def test_names_match_the_files_the_trainer_has_always_written(tmp_path):
    run = RunDir(tmp_path)
    assert run.config_file.name == "config.json"
    assert run.metrics_file.name == "metrics.jsonl"
    assert run.summary_file.name == "summary.json"
    assert run.sft_file.name == "sft.jsonl"
    assert run.tokenizer_dir.name == "tokenizer"
    assert run.trajectory_file(7).relative_to(tmp_path).as_posix() == "trajectories/step_00007.jsonl"
    assert run.token_file(12).relative_to(tmp_path).as_posix() == "tokens/step_00012.npz"
    assert run.checkpoint_dir(3).relative_to(tmp_path).as_posix() == "checkpoints/step_00003"
    assert step_name(123456) == "step_123456"
    assert [step_number(n) for n in ("step_00042.jsonl", "step_7", ".step_00001.tmp", "stepx_1", "x")] == [
        42,
        7,
        None,
        None,
        None,
    ]


def test_metrics_skip_a_torn_last_line_but_not_a_bad_line_elsewhere(tmp_path):
    run = RunDir(tmp_path)
    run.append_metrics({"step": 1.0, "r": 0.5})
    run.append_metrics({"step": 2.0, "r": 0.7})
    with open(run.metrics_file, "a") as f:
        f.write('{"step": 3.0, "r"')  # a run killed mid-write
    with pytest.warns(TornLineWarning, match=r"metrics\.jsonl:3: skipped a torn last line \(17 bytes"):
        assert [r["step"] for r in run.metrics()] == [1.0, 2.0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2"):
        read_jsonl(bad)
    run.rewrite_metrics([{"step": 1.0}])
    assert run.metrics() == [{"step": 1.0}]


def test_latest_checkpoint_is_the_highest_complete_one(tmp_path):
    run = RunDir(tmp_path)
    assert run.latest_checkpoint() is None
    for step, complete in ((2, True), (10, True), (11, False)):
        d = run.checkpoint_dir(step)
        d.mkdir(parents=True)
        if complete:
            (d / "state.pt").write_bytes(b"x")
    (run.checkpoints_dir / ".step_00012.tmp").mkdir()  # a save in progress
    assert run.latest_checkpoint() == run.checkpoint_dir(10)
    assert checkpoint_state_file(tmp_path) == run.checkpoint_dir(10) / "state.pt"
    assert checkpoint_state_file(run.checkpoints_dir) == run.checkpoint_dir(10) / "state.pt"
    assert checkpoint_state_file(run.checkpoint_dir(2)) == run.checkpoint_dir(2) / "state.pt"
    assert checkpoint_state_file(run.checkpoint_dir(11)) is None


def test_step_files_config_summary_and_token_stats_round_trip(tmp_path):
    run = RunDir(tmp_path)
    for step in (1, 3):
        run.trajectory_file(step).parent.mkdir(parents=True, exist_ok=True)
        run.trajectory_file(step).write_text("")
    (tmp_path / "trajectories" / "notes.txt").write_text("")
    assert sorted(run.trajectory_files()) == [1, 3] and run.is_run()
    run.write_config({"algorithm": {"name": "ppo"}})
    run.write_summary({"steps": 2})
    assert RunDir(tmp_path).config() == {"algorithm": {"name": "ppo"}}
    assert run.summary() == {"steps": 2}
    stats = {"a": {"positions": np.array([2, 5]), "advantages": np.array([0.5, -1.0], np.float32)}}
    run.write_token_stats(3, stats)
    assert sorted(run.token_files()) == [3]
    back = RunDir(tmp_path).token_stats(3)
    assert back is not None and back["a"]["positions"].tolist() == [2, 5]
    assert back["a"]["advantages"].tolist() == [0.5, -1.0]
    assert run.token_stats(4) is None
    run.summary_file.write_text("{")
    with pytest.raises(ConfigError, match=r"summary\.json"):
        run.summary()
    with pytest.raises(ConfigError, match="no such run directory"):
        RunDir.open(tmp_path / "missing")


def test_the_trainers_run_log_is_read_back_through_the_same_module(tmp_path):
    """RunLog (the writer) and RunDir (every reader) agree on the files, a resume truncates."""
    from agentrl.train.report import RunLog

    log = RunLog(tmp_path)
    for step in (1, 2, 3):
        log.step({"step": float(step), "critic/score/normalized_mean": step / 10})
    log.sft(1, 0.25)
    log.truncate_after(2)
    summary = log.finish()
    run = RunDir(tmp_path)
    assert [r["step"] for r in run.metrics()] == [1.0, 2.0]
    assert run.sft() == [{"sft/step": 1, "sft/loss": 0.25}]
    assert run.summary() == json.loads(json.dumps(summary)) and summary["steps"] == 2
    assert [r["step"] for r in RunLog(tmp_path).rows] == [1.0, 2.0]
    assert 0 < summary["peak_rss_mb"] < 1e6


def test_the_summarys_peak_rss_is_the_process_peak_in_mib():
    """``peak_rss_mb`` in MiB: a fresh process that touches its peak so far plus 300 MiB raises it by
    about 300 (a unit off by 1024 fails). Linux carries a parent's peak into a child it forks, so the
    child starts from the test process's peak, and allocates above it."""
    code = (
        "from agentrl.train.report import peak_rss_mb; a = peak_rss_mb(); x = bytearray(int(a + 300) << 20); "
        "print(a, peak_rss_mb())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, after = map(float, out.split())
    assert 250 < after - before < 450


def test_mend_jsonl_tail_cuts_a_torn_line_and_ends_a_whole_one(tmp_path):
    """Before a resumed run appends: a torn last line is cut (else the next row would glue to it and
    become a bad line in the middle), a JSON last line without its newline gets one."""
    from agentrl.rundir import mend_jsonl_tail

    path = tmp_path / "sft.jsonl"
    assert mend_jsonl_tail(path) == 0  # absent
    path.write_bytes(b"")
    assert mend_jsonl_tail(path) == 0
    path.write_bytes(b'{"k": 1}\n{"k": 2}\n')
    assert mend_jsonl_tail(path) == 0 and path.read_bytes() == b'{"k": 1}\n{"k": 2}\n'
    path.write_bytes(b'{"k": 1}\n{"k": 2}\n{"k": \xe2\x82')  # torn mid-line, mid-character
    assert mend_jsonl_tail(path) == 8
    assert path.read_bytes() == b'{"k": 1}\n{"k": 2}\n'
    path.write_bytes(b'{"k": 1}\n{"k": 2}')  # whole, only the newline missing
    assert mend_jsonl_tail(path) == 0 and path.read_bytes() == b'{"k": 1}\n{"k": 2}\n'
    path.write_bytes(b'{"k": ' + b"x" * 200_000)  # one torn line longer than a read block
    assert mend_jsonl_tail(path) == 200_006 and path.read_bytes() == b""
    run = RunDir(tmp_path)
    run.append_sft({"sft/step": 1, "sft/loss": 0.5})
    with open(run.sft_file, "ab") as f:
        f.write(b'{"sft/step": 2, "sft/lo')
    mend_jsonl_tail(run.sft_file)
    run.append_sft({"sft/step": 2, "sft/loss": 0.4})
    assert [r["sft/step"] for r in run.sft()] == [1, 2]


def test_forget_after_drops_later_steps_and_interrupted_writes(tmp_path):
    run = RunDir(tmp_path)
    for step in (1, 2, 3):
        run.trajectory_file(step).parent.mkdir(exist_ok=True)
        run.trajectory_file(step).write_text("{}\n")
        run.write_token_stats(step, {})
    (tmp_path / "trajectories" / ".step_00004.jsonl.tmp-99").write_text("{")
    run.forget_after(1)
    assert sorted(run.trajectory_files()) == [1] and sorted(run.token_files()) == [1]
    assert sorted(p.name for p in (tmp_path / "trajectories").iterdir()) == ["step_00001.jsonl"]
