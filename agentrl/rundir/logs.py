"""The run's append-only logs, ``metrics.jsonl`` and ``sft.jsonl``: reading them tolerantly (a torn
last line skipped), mending a torn tail before appending, writing a row, and checking that they
cover the steps a checkpoint comes after (``check_logs``, before a resume)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError, TornLineWarning
from agentrl.jsonl import dumps, finite_or_null, line_text, mend_tail, read_records
from agentrl.rundir.layout import METRICS, SFT, checkpoint_order


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (``[]`` when it does not exist), read a line at a time
    (``agentrl.jsonl``). A torn last line (a live or killed run) is skipped with a note; a bad line
    elsewhere, a line that is not UTF-8 JSON or one too long is a ``ConfigError`` naming ``path:line``."""
    if not path.exists():
        return []

    def row(line: bytes, lineno: int) -> Any:
        text = line_text(line, path, lineno)
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as e:  # JSONDecodeError; nesting too deep
            raise ConfigError(f"{path}:{lineno}: not a JSON line: {e}") from None

    return [r for r in read_records(path, row) if isinstance(r, dict)]


def mend_jsonl_tail(path: Path) -> int:
    """Make an append-only JSONL file end on a whole line before more is appended to it
    (``agentrl.jsonl.mend_tail``): a torn last line (no newline, not JSON: a run killed mid-write) is
    cut off, a JSON last line that only lacks its newline gets one. Returns the bytes cut (0 when none)."""
    return mend_tail(path, _is_json)[1]


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:  # UnicodeDecodeError included
        return False
    return True


def metric_line(row: dict[str, Any]) -> str:
    """One row of ``metrics.jsonl`` or ``sft.jsonl``, with its newline."""
    # A metric may be undefined (a gradient norm that overflowed: the update was skipped); it is
    # written null, which every reader of metrics takes as "no value", so the file stays JSON.
    return dumps(finite_or_null(row)) + "\n"


def check_logs(run: Path, checkpoint: Path, warm_steps: int = 0) -> None:
    """``ConfigError`` unless the logs of the run directory ``run`` hold every step ``checkpoint``
    comes after: ``metrics.jsonl`` a row for each RL step 1…n of ``step_n``, ``sft.jsonl`` one for
    each warm-start step 1…k of ``sft_k``, and for an RL checkpoint of a run that warm-started
    ``warm_steps`` steps, those too (the trainer logs a step before it checkpoints it). A resume
    without them would end with a summary and a curve of the later steps alone."""
    kind, n = checkpoint_order(checkpoint) or (1, 0)
    if kind == 1 and warm_steps > 0:
        after = f"comes after the warm start's {warm_steps} steps"
        _check_log(run, checkpoint, run / SFT, "sft/step", warm_steps, after)
    file, key = (run / METRICS, "step") if kind == 1 else (run / SFT, "sft/step")
    _check_log(run, checkpoint, file, key, n, f"comes after step {n}")


def _check_log(run: Path, checkpoint: Path, file: Path, key: str, n: int, after: str) -> None:
    """``ConfigError`` unless ``file`` holds a row with each ``key`` 1…``n``."""
    if n == 0:
        return
    name = checkpoint.relative_to(run) if checkpoint.is_relative_to(run) else checkpoint
    if not file.is_file():
        gap = "is missing"
    else:
        with warnings.catch_warnings():  # a torn last line: noted once, when the trainer reads it
            warnings.simplefilter("ignore", TornLineWarning)
            rows = read_jsonl(file)
        logged = {int(r[key]) for r in rows if isinstance(r.get(key), int | float)}
        missing = [s for s in range(1, n + 1) if s not in logged]
        if not missing:
            return
        gap = f"lacks steps {_spans(missing)}"
    raise ConfigError(
        f"--resume: {file} {gap}, and {name} {after}: the run's files disagree; "
        f"put the run's {file.name} back, or start over with --overwrite"
    )


def _spans(steps: list[int]) -> str:
    """``1-3, 7``: sorted step numbers as runs."""
    spans: list[list[int]] = []
    for s in steps:
        if spans and s == spans[-1][1] + 1:
            spans[-1][1] = s
        else:
            spans.append([s, s])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)
