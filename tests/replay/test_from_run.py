"""Issue 35 row 11: ``agentrl replay --tensors --run RUN`` refuses trajectories that are not RUN's own
(``agentrl.replay.from_run``): ids repeat across runs, so another run's step-3 trajectory would find
RUN's step-3 numbers under its id."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.errors import ConfigError
from agentrl.replay.from_run import check_from_run
from agentrl.rundir import RunDir
from agentrl.trajectory import Trajectory, read_trajectories, write_trajectories


def _run(root: Path, trajs: list[Trajectory], tok_dir: Path, step: int = 1) -> RunDir:
    """A run directory as the trainer leaves one: its tokenizer and step ``step``'s trajectories."""
    run = RunDir(root)
    shutil.copytree(tok_dir, run.tokenizer_dir)
    for t in trajs:
        t.info["step"] = step
    write_trajectories(run.trajectory_file(step), trajs)
    return run


def _other(trajs: list[Trajectory]) -> list[Trajectory]:
    """The same tasks and ids, sampled otherwise (another run)."""
    out = [t.model_copy(deep=True) for t in trajs]
    last = out[0].messages[-1]
    last.content = f"{last.text} (another run)"
    return out


@pytest.fixture
def runs(recorded, tok_dir, tmp_path):
    traj, _ = recorded
    mine = list(read_trajectories(traj))
    return _run(tmp_path / "A", mine, tok_dir), _run(tmp_path / "B", _other(mine), tok_dir)


def _replay(capsys, traj: Path, run: RunDir, out: Path) -> tuple[int, str]:
    rc = main(["replay", str(traj), "--run", str(run.path), "--tensors", str(out)])
    return rc, capsys.readouterr().err


def test_replay_refuses_another_runs_trajectories(runs, tmp_path, capsys):
    a, b = runs
    theirs = b.trajectory_file(1)
    rc, err = _replay(capsys, theirs, a, tmp_path / "t.pt")
    assert rc == 1 and not (tmp_path / "t.pt").exists()
    first = next(iter(read_trajectories(theirs))).id
    assert err == (
        f"agentrl replay: error: {theirs}: trajectory {first!r} (step 1) is not one of --run {a.path}'s "
        f"({a.trajectory_file(1)}: another episode under that id); give the run it came from, or "
        "--tokenizer without --run\n"
    )
    rc, err = _replay(capsys, a.trajectory_file(1), a, tmp_path / "t.pt")
    assert rc == 0 and (tmp_path / "t.pt").is_file(), err


def test_a_copy_of_the_runs_own_file_is_its_own_and_a_step_it_never_had_is_not(runs, tmp_path):
    a, _ = runs
    mine = list(read_trajectories(a.trajectory_file(1)))
    copy = tmp_path / "elsewhere.jsonl"  # moved out of the run: info.step still names the step
    write_trajectories(copy, mine)
    check_from_run(mine, copy, a)
    rescored = [t.model_copy(update={"reward": None}) for t in mine]  # rewards may differ
    check_from_run(rescored, copy, a)
    later = [t.model_copy(update={"info": {**t.info, "step": 2}}) for t in mine]
    with pytest.raises(ConfigError, match=r"\(step 2\) is not one of .*step_00002\.jsonl: no such file"):
        check_from_run(later, copy, a)
    stranger = [mine[0].model_copy(update={"id": "nobody#9"})]
    with pytest.raises(ConfigError, match="no trajectory with that id"):
        check_from_run(stranger, copy, a)


def test_evaluation_episodes_are_looked_up_in_the_runs_evaluation(runs, tmp_path):
    a, _ = runs
    episodes = [
        t.model_copy(update={"info": {"eval_step": 3}}) for t in read_trajectories(a.trajectory_file(1))
    ]
    write_trajectories(a.eval_file(3), episodes)
    check_from_run(episodes, a.eval_file(3), a)
    with pytest.raises(ConfigError, match=r"eval/step_00003\.jsonl: another episode"):
        check_from_run(_other(episodes), tmp_path / "x.jsonl", a)


def test_a_rollout_names_no_run_and_borrows_only_its_tokenizer(recorded, runs, tmp_path, capsys):
    """A plain rollout (no step) came from no run: ``--run`` lends its tokenizer and settings."""
    traj, _ = recorded
    a, _ = runs
    rc, err = _replay(capsys, traj, a, tmp_path / "t.pt")
    assert rc == 0, err
