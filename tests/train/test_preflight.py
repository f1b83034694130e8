"""What ``agentrl train`` checks before it builds or writes anything (``agentrl.train.preflight`` and
``load_train_config``): duplicate keys, non-UTF-8 text, input paths found from the working directory
or the config's own (and, when in neither, an error listing both), a model path that is not a
model, and an output directory that is used, foreign, a file, or has nothing to resume. The CLI
end of the same checks, with real runs, is ``tests/robustness/test_train_cli.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from agentrl.errors import ConfigError
from agentrl.rundir import RunDir
from agentrl.train import TrainConfig, load_train_config
from agentrl.train.preflight import check_inputs, check_output_dir, prepare_output_dir
from tests.train.learning_signal import RUBRIC

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "examples" / "quickstart-env"


def test_duplicate_keys_are_errors_naming_file_line_and_field(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("steps: 3\nseed: 1\nsteps: 4\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml:3:1: steps: duplicate key$"):
        load_train_config(path)
    path.write_text("rollout:\n  max_turns: 2\n  group_size: 2\n  max_turns: 3\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml:4:3: rollout\.max_turns: duplicate key$"):
        load_train_config(path)
    # the same key in two different mappings is not a duplicate
    path.write_text("rollout:\n  max_turns: 2\nmodel:\n  path: 'tiny:'\nsteps: 1\n")
    assert load_train_config(path).rollout.max_turns == 2


def test_a_config_that_is_not_utf8_or_not_yaml_is_one_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("steps: 3\n# caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml:2: not UTF-8 text") as e:
        load_train_config(path)
    assert "\n" not in str(e.value)
    path.write_text("seed: !!int abc\n")
    with pytest.raises(ConfigError, match=r"latin1\.yaml:1:7: not valid YAML: cannot read the value 'abc'"):
        load_train_config(path)
    path.write_text("steps: [1\n")
    with pytest.raises(ConfigError, match=r"latin1\.yaml:2:1: not valid YAML"):
        load_train_config(path)


def test_relative_paths_resolve_from_the_config_directory_and_errors_say_where_they_looked(
    tmp_path, monkeypatch
):
    """A config next to its suite and rubric runs from any working directory; a path found in
    neither place names both."""
    home = tmp_path / "project"
    home.mkdir()
    shutil.copytree(SUITE, home / "my-suite")
    shutil.copy(RUBRIC, home / "rubric.yaml")
    (home / "tools.sqlite").write_bytes(b"")
    cfg = home / "cfg.yaml"
    rollout = {"suite": "my-suite", "env": {"cache": {"mode": "replay", "path": "tools.sqlite"}}}
    cfg.write_text(yaml.safe_dump({"rollout": rollout, "judge": {"rubric": "rubric.yaml"}}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_train_config(cfg)
    assert Path(loaded.rollout.suite) == home / "my-suite"
    assert Path(loaded.judge.rubric) == home / "rubric.yaml"
    assert Path(loaded.rollout.env["cache"]["path"]) == home / "tools.sqlite"
    check_inputs(loaded)  # the resolved paths load
    # found from the working directory first: the value is kept as written
    (elsewhere / "my-suite").mkdir()
    assert load_train_config(cfg).rollout.suite == "my-suite"
    # a cache a recording will create is no error; it stays as written
    rollout["env"]["cache"] = {"mode": "record", "path": "new.sqlite"}
    cfg.write_text(yaml.safe_dump({"rollout": rollout}))
    assert load_train_config(cfg).rollout.env["cache"]["path"] == "new.sqlite"
    # in neither place: the error names the field, the config line and both places
    cfg.write_text(yaml.safe_dump({"rollout": {"suite": "missing-suite"}}))
    with pytest.raises(ConfigError) as e:
        load_train_config(cfg)
    msg = str(e.value)
    assert msg.startswith(f"{cfg}:2:3: rollout.suite 'missing-suite': not found"), msg
    assert str(elsewhere / "missing-suite") in msg and str(home / "missing-suite") in msg


def test_a_model_path_that_is_missing_or_not_a_model_is_one_line_naming_field_and_path(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"path": "/nonexistent/model"}}))
    with pytest.raises(ConfigError, match=r"cfg\.yaml:2:3: model\.path '/nonexistent/model': not found"):
        load_train_config(cfg)
    with pytest.raises(ConfigError, match=r"^model\.path '/nonexistent/model': not found"):
        check_inputs(TrainConfig.model_validate({"model": {"path": "/nonexistent/model"}}))
    with pytest.raises(ConfigError, match=r"^model\.path '.*': not a model directory \(no .*config\.json\)"):
        check_inputs(TrainConfig.model_validate({"model": {"path": str(tmp_path)}}))
    # a hub id is left to transformers (no network here: only its form is accepted)
    cfg.write_text(yaml.safe_dump({"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"}}))
    assert load_train_config(cfg).model.path == "Qwen/Qwen2.5-0.5B-Instruct"


def test_a_missing_or_broken_rubric_and_suite_are_reported_by_the_checks(tmp_path):
    with pytest.raises(
        ConfigError, match=r"^judge\.rubric 'nope\.yaml': not found \(looked for .*nope\.yaml\)"
    ):
        check_inputs(TrainConfig.model_validate({"judge": {"rubric": "nope.yaml"}}))
    bad = tmp_path / "bad_rubric.yaml"
    bad.write_text("id: x\ncriteria: 3\n")
    with pytest.raises(ConfigError, match=r"^judge\.rubric: .*bad_rubric\.yaml:2:\d+: criteria"):
        check_inputs(TrainConfig.model_validate({"judge": {"rubric": str(bad)}}))
    llm = tmp_path / "llm_rubric.yaml"
    llm.write_text("id: l\ncriteria:\n  - {id: c, text: 'Is it right?', weight: 1}\n")
    with pytest.raises(ConfigError, match=r"has LLM criteria \(c\): set judge\.model"):
        check_inputs(TrainConfig.model_validate({"judge": {"rubric": str(llm)}}))
    (tmp_path / "empty-suite").mkdir()
    with pytest.raises(ConfigError, match=r"^rollout\.suite: .*tasks\.jsonl is missing"):
        check_inputs(TrainConfig.model_validate({"rollout": {"suite": str(tmp_path / "empty-suite")}}))


def _fake_run(path: Path) -> None:
    """The files a finished run leaves (their contents do not matter to the checks)."""
    run = RunDir(path)
    run.append_metrics({"step": 1})
    run.write_config({"steps": 1})
    (run.checkpoint_dir(1)).mkdir(parents=True)
    (run.checkpoint_dir(1) / "state.pt").write_bytes(b"x")
    run.trajectory_file(1).parent.mkdir()
    run.trajectory_file(1).write_text("{}\n")
    (path / ".summary.json.tmp-123").write_text("{")  # an interrupted atomic write


def test_output_dir_used_foreign_file_or_nothing_to_resume(tmp_path):
    out = tmp_path / "run"
    check_output_dir(out)  # new: fine, and nothing is created
    assert not out.exists()
    out.mkdir()
    (out / "config.yaml").write_text("steps: 1\n")  # the user's own config beside the run is no run
    check_output_dir(out)
    _fake_run(out)
    with pytest.raises(ConfigError, match=r"already holds a run \(.*checkpoints.*\): --resume continues it"):
        check_output_dir(out)
    check_output_dir(out, resume=True)
    check_output_dir(out, overwrite=True)
    with pytest.raises(ConfigError, match="exclude each other"):
        check_output_dir(out, resume=True, overwrite=True)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"not empty and not a run directory \(notes\.txt\)"):
        check_output_dir(out)
    with pytest.raises(ConfigError, match=r"--overwrite: .* did not write \(notes\.txt\): not deleting it"):
        check_output_dir(out, overwrite=True)
    with pytest.raises(ConfigError, match="did not write"):
        prepare_output_dir(out, overwrite=True)
    assert RunDir(out).latest_checkpoint() is not None  # nothing was deleted
    with pytest.raises(ConfigError, match=r"output_dir .*notes\.txt: is an existing file, not a directory"):
        check_output_dir(out / "notes.txt")
    with pytest.raises(ConfigError, match=r"output_dir .*notes\.txt/run: Not a directory"):
        check_output_dir(out / "notes.txt" / "run")
    with pytest.raises(ConfigError, match=r"^--resume: output_dir .*missing does not exist"):
        check_output_dir(tmp_path / "missing", resume=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        ConfigError, match=r"^--resume: output_dir .*empty is empty: there is no run to resume; run without"
    ):
        check_output_dir(tmp_path / "empty", resume=True)
    shutil.rmtree(RunDir(out).checkpoints_dir)
    with pytest.raises(
        ConfigError, match=r"has no complete checkpoint under .*checkpoints .*cannot be started over there"
    ):
        check_output_dir(out, resume=True)
    (out / "notes.txt").unlink()
    check_output_dir(out, resume=True)  # a run stopped before its first checkpoint: started over


def test_overwrite_deletes_only_what_agentrl_wrote(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    _fake_run(out)
    (out / "config.yaml").write_text("steps: 1\n")
    deleted = prepare_output_dir(out, overwrite=True)
    assert {"checkpoints", "config.json", "metrics.jsonl", "trajectories", ".summary.json.tmp-123"} == set(
        deleted
    )
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml"]
    check_output_dir(out)  # a fresh run may now start there
    assert prepare_output_dir(out, overwrite=False) == []


def test_an_output_dir_that_cannot_be_written_is_refused(tmp_path, monkeypatch):
    """(Permissions mean nothing to root, which runs these tests: ``os.access`` answers for them.)"""
    import os

    (tmp_path / "ro").mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p).name != "ro" and real(p, mode))
    with pytest.raises(ConfigError, match=r"^output_dir .*ro: .*ro is not writable$"):
        check_output_dir(tmp_path / "ro")
    with pytest.raises(ConfigError, match=r"^output_dir .*ro/a/b: .*ro is not writable$"):
        check_output_dir(tmp_path / "ro" / "a" / "b")
    check_output_dir(tmp_path / "rw" / "a")


def test_output_dir_writability_is_the_shared_check(tmp_path, monkeypatch):
    """One owner: ``train``'s preflight refuses exactly what ``agentrl.outputs.check_output_dir``
    refuses, with the same line, including a directory whose mode bits say writable but where no
    file can be created (a read-only mount, as root sees it: ``os.access`` says yes)."""
    import errno
    import os

    from agentrl.outputs import check_output_dir as shared

    (tmp_path / "file").write_text("x")
    (tmp_path / "rofs").mkdir()
    real = os.open

    def read_only_mount(p, flags, *args, **kwargs):
        if Path(p).parent.name == "rofs" and flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system", str(p))
        return real(p, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_mount)
    for bad in ("file", "file/run", "rofs", "rofs/new/run", "/proc/run"):
        path = Path(bad) if bad.startswith("/") else tmp_path / bad
        with pytest.raises(ConfigError) as want:
            shared(path, flag="output_dir")
        with pytest.raises(ConfigError) as got:
            check_output_dir(path)
        assert str(got.value) == str(want.value)
    with pytest.raises(ConfigError, match=r"^output_dir .*rofs: cannot create a file in .*rofs: Read-only"):
        check_output_dir(tmp_path / "rofs")
    assert list((tmp_path / "rofs").iterdir()) == []
    check_output_dir(tmp_path / "fresh" / "run")  # what the shared check accepts, the preflight accepts
    shared(tmp_path / "fresh" / "run", flag="output_dir")
