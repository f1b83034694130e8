"""Whether stored trajectories are a given training run's own, before its stored numbers are used.

Nothing in a trajectory names its run: ids are ``task#sample`` and repeat in every run on the same
tasks, so another run's step-3 trajectory would find this run's step-3 values under its id. What
does tell is the run's own record. A trajectory that names a training step (``info.step``, else
its file's ``step_NNNNN``) is the run's when ``RUN/trajectories/step_NNNNN.jsonl`` holds a
trajectory with its id and the same messages (the sampled tokens included); an evaluation episode
(``info.eval_step``) is looked up in ``RUN/eval/step_NNNNN.jsonl`` the same way. Rewards may
differ (a re-scored copy is still the run's episode). A trajectory with no step (a plain rollout)
comes from no run, and ``--run`` then only lends its tokenizer and settings.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from agentrl.errors import ConfigError
from agentrl.replay.steps import step_of
from agentrl.rundir import RunDir
from agentrl.trajectory import Message, Trajectory, read_trajectories

__all__ = ["check_from_run"]


def _where(t: Trajectory, source: str | Path) -> tuple[str, int] | None:
    """(``trajectories`` or ``eval``, step) of the run file that should hold ``t``; None when it names no step."""
    eval_step = t.info.get("eval_step")
    if isinstance(eval_step, int) and not isinstance(eval_step, bool):
        return "eval", eval_step
    step = step_of(t, source)
    return None if step is None else ("trajectories", step)


def check_from_run(trajs: list[Trajectory], source: str | Path, run: RunDir) -> None:
    """Refuse, with one ``ConfigError`` naming the trajectory, its step and the run's file, any of
    ``trajs`` (read from ``source``) that names a step of a training run but is not one of ``run``'s
    (see the module docstring). Reads one file of the run per step named."""
    wanted: dict[tuple[str, int], list[Trajectory]] = defaultdict(list)
    for t in trajs:
        where = _where(t, source)
        if where is not None:
            wanted[where].append(t)
    for (folder, step), mine in sorted(wanted.items()):
        path = run.eval_file(step) if folder == "eval" else run.trajectory_file(step)
        theirs: dict[str, list[Message]] = {}
        if path.is_file():
            theirs = {u.id: u.messages for u in read_trajectories(path)}
        for t in mine:
            if theirs.get(t.id) == t.messages:
                continue
            if not path.is_file():
                what = "no such file"
            else:
                what = "another episode under that id" if t.id in theirs else "no trajectory with that id"
            raise ConfigError(
                f"{source}: trajectory {t.id!r} (step {step}) is not one of --run {run.path}'s ({path}: "
                f"{what}); give the run it came from, or --tokenizer without --run"
            )
