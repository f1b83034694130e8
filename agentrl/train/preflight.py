"""What ``agentrl train`` checks before it builds anything or writes a file.

The inputs the config names (the suite, ``judge.rubric``, ``model.path``, ``model.tokenizer``) must
exist and load; the output directory must be a directory or creatable, writable, and empty unless
the run resumes it (``--resume``: it must hold a checkpoint) or replaces it (``--overwrite``: it
must hold nothing but what agentrl writes). Whether it can be written is ``agentrl.outputs``'s
check, shared with every other command's output flag. Each failure is one ``ConfigError`` naming the field or
flag and the path. Only light modules are imported (no torch), so a bad config is reported at once.

Under ``torchrun`` every rank checks its inputs, and rank 0 alone judges and clears the output
directory (the other ranks would otherwise see rank 0's first files and call the directory used).

One run writes a directory at a time: ``hold_output_dir`` takes its lock (``agentrl.runlock``) for
the run's life and checks the directory again under it; a directory another live run holds is
refused by ``check_output_dir`` already, in one line naming that run. A ``--resume`` of a run that
stopped before its first checkpoint starts it over (nothing was saved that could be continued).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentrl.errors import AgentRLError, ConfigError
from agentrl.hub import check_hub_id
from agentrl.outputs import check_output_dir as writable_dir
from agentrl.ranks import is_main
from agentrl.rundir import RunDir
from agentrl.runlock import OutputLock, lock_output, refuse_if_held
from agentrl.train.config import TrainConfig, is_hub_id, resolve_input

__all__ = [
    "check_inputs",
    "check_output_dir",
    "check_run",
    "hold_output_dir",
    "prepare_output_dir",
    "setting_up",
]


def _names(names: list[str], most: int = 4) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _existing(field: str, value: str) -> Path:
    found, tried = resolve_input(value, None)
    if found is None:
        raise ConfigError(f"{field} {value!r}: not found (looked for {' or '.join(map(str, tried))})")
    return found


def check_inputs(cfg: TrainConfig) -> None:
    """The suite, rubric, model and tokenizer the config names exist and load."""
    from agentrl.env.suite import load_suite
    from agentrl.judge import load_rubric

    field = "rollout.env.suite" if "suite" in cfg.rollout.env else "rollout.suite"
    suite = str(cfg.rollout.env.get("suite", cfg.rollout.suite))
    if suite != "sandbox":
        _existing(field, suite)
    try:
        load_suite(suite)  # cached: the trainer's envs load it again for free
    except AgentRLError as e:
        raise ConfigError(f"{field}: {e}") from None
    if cfg.judge.rubric:
        path = _existing("judge.rubric", cfg.judge.rubric)
        try:
            rubric = load_rubric(path)
        except AgentRLError as e:
            raise ConfigError(f"judge.rubric: {e}") from None
        llm = [c.id for c in rubric.criteria if c.is_llm]
        if llm and cfg.judge.model is None:
            raise ConfigError(
                f"judge.rubric {path} has LLM criteria ({', '.join(llm)}): set judge.model (a litellm model)"
            )
    m = cfg.model
    local = not is_hub_id(m.path) or Path(m.path).expanduser().exists()
    if not m.path.startswith("tiny:") and local:
        path = _existing("model.path", m.path)
        if not (path / "config.json").is_file():
            raise ConfigError(f"model.path {m.path!r}: not a model directory (no {path / 'config.json'})")
    elif not m.path.startswith("tiny:"):
        check_hub_id("model.path", m.path)  # cached, or the hub says it exists: seconds, not a minute
    if m.tokenizer and not is_hub_id(m.tokenizer):
        _existing("model.tokenizer", m.tokenizer)
    elif m.tokenizer and not Path(m.tokenizer).expanduser().exists():
        check_hub_id("model.tokenizer", m.tokenizer, filename="tokenizer_config.json")


def check_output_dir(path: str | Path, *, resume: bool = False, overwrite: bool = False) -> None:
    """``output_dir`` can hold this run: ``agentrl.outputs.check_output_dir`` (the one owner of
    output-path checks: a directory or creatable, and a file can really be created there), then the
    train rules: without ``resume`` or ``overwrite`` it holds no earlier run; with ``resume`` it
    holds a complete checkpoint; with ``overwrite`` it holds nothing agentrl did not write."""
    out = Path(path)
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite exclude each other")
    writable_dir(out, flag="output_dir")
    run = RunDir(out)
    if is_main():  # under torchrun rank 0 holds the lock for every rank
        refuse_if_held(run.lock_file, what=f"output_dir {out}")
    if resume:
        if not out.is_dir():
            raise ConfigError(
                f"--resume: output_dir {out} does not exist: there is no run to resume; "
                "run without --resume to start one"
            )
        if run.latest_checkpoint() is None:
            ours, foreign = run.entries()
            if foreign and ours:
                raise ConfigError(
                    f"--resume: output_dir {out} has no complete checkpoint under {run.checkpoints_dir} (the "
                    f"run stopped before its first), and it cannot be started over there: it holds files "
                    f"agentrl did not write ({_names(foreign)}); move them away or choose another output_dir"
                )
            if foreign:
                raise ConfigError(
                    f"--resume: output_dir {out} is not a run directory ({_names(foreign)}): there is "
                    "nothing to resume; choose the run's output_dir"
                )
            if not ours:
                raise ConfigError(
                    f"--resume: output_dir {out} is empty: there is no run to resume; run without "
                    "--resume to start one"
                )
            # A run stopped before its first checkpoint: the trainer starts it over (hold_output_dir).
        return
    if not is_main():
        return
    ours, foreign = run.entries()
    if foreign:
        if overwrite:
            raise ConfigError(
                f"--overwrite: output_dir {out} holds files agentrl did not write ({_names(foreign)}): "
                "not deleting it; choose another output_dir"
            )
        raise ConfigError(
            f"output_dir {out} is not empty and not a run directory ({_names(foreign)}): choose another output_dir"
        )
    if ours and not overwrite:
        raise ConfigError(
            f"output_dir {out} already holds a run ({_names(ours)}): --resume continues it, --overwrite "
            "deletes it and starts over, or choose another output_dir"
        )


def check_run(cfg: TrainConfig, *, resume: bool = False, overwrite: bool = False) -> None:
    """Everything a run is checked for before its setup: the output directory, then the inputs."""
    check_output_dir(cfg.output_dir, resume=resume, overwrite=overwrite)
    check_inputs(cfg)


def prepare_output_dir(path: str | Path, *, overwrite: bool = False) -> list[str]:
    """After ``check_run``: with ``overwrite``, delete the earlier run in ``path`` (rank 0 only).
    Returns the names deleted."""
    if not overwrite or not is_main():
        return []
    return RunDir(path).clear()


def hold_output_dir(
    path: str | Path, *, resume: bool = False, overwrite: bool = False
) -> tuple[OutputLock | None, bool]:
    """After ``check_run``: take ``path``'s lock for the run's life (rank 0; created if missing) and
    check the directory again under it (another run may have written it meanwhile). Returns the
    lock (None on other ranks) and whether the run starts over: a ``--resume`` with no complete
    checkpoint yet (a kill during the setup or the first warm-start steps) runs from the beginning,
    after deleting what the stopped run wrote (said on stderr)."""
    out = Path(path)
    lock = lock_output(RunDir(out).lock_file, what=f"output_dir {out}") if is_main() else None
    try:
        check_output_dir(out, resume=resume, overwrite=overwrite)
    except BaseException:
        if lock is not None:
            lock.release()  # and the directory it created
        raise
    start_over = resume and RunDir(out).latest_checkpoint() is None
    if start_over and is_main():
        print(
            f"output_dir {out}: the run stopped before its first checkpoint; starting it over",
            file=sys.stderr,
            flush=True,
        )
    return lock, start_over


@contextmanager
def setting_up(path: str | Path, *, overwrite: bool = False, fresh: bool | None = None) -> Iterator[None]:
    """Around a run's setup, after ``check_run``: with ``overwrite``, delete the earlier run first
    (saying what was deleted); if the setup fails in a directory that did not exist before
    (``fresh``; by default: does not exist now), remove the directory again, so a failed start
    leaves nothing behind (rank 0 only)."""
    out = Path(path)
    fresh = not out.exists() if fresh is None else fresh
    cleared = prepare_output_dir(out, overwrite=overwrite)
    if cleared:
        print(
            f"output_dir {out}: deleted the earlier run ({', '.join(cleared)})", file=sys.stderr, flush=True
        )
    try:
        yield
    except BaseException:
        if fresh and is_main() and out.is_dir():
            shutil.rmtree(out, ignore_errors=True)
        raise
