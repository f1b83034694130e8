"""What a training run shows while it works: each setup phase (the warm start's oracle episodes,
the tokenizer, the models), the warm start with its loss, every RL step with its phases (rollout,
judge, update) and reward, checkpoints and the summary.

``make_progress(live=True)`` draws a rich display when stderr is a terminal; otherwise, and with
``live=False`` (``agentrl train --no-progress``), it prints plain lines: one when a phase starts and
one when it ends, the warm start's loss every tenth of its steps, one line per RL step, and a
counted phase's count (``agentrl rollout``'s episodes, ``agentrl judge``'s trajectories) every
tenth and at least every 30 s once it has run 2 s. All of
it goes to stderr, so stdout keeps only the run's JSON summary. Ranks other than 0 get
``Progress``, which shows nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from agentrl.train.report import REWARD_KEY, VAL_HIGH, VAL_KEY, VAL_LOW

__all__ = ["Counter", "LineProgress", "LiveProgress", "Progress", "make_progress", "step_line"]


def _s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def step_line(metrics: dict[str, Any], total: int) -> str:
    """The one line of a finished RL step: its reward and how long each phase took."""
    t = {k.removeprefix("timing_s/"): v for k, v in metrics.items() if k.startswith("timing_s/")}
    parts = [f"reward {metrics.get(REWARD_KEY, 0.0):.3f}", f"rollout {_s(t.get('rollout', 0.0))}"]
    parts.append(f"judge {_s(t.get('judge', 0.0))}")
    if metrics.get("train/skipped_update"):
        parts.append("update skipped (nothing trainable)")
    else:
        parts.append(f"update {_s(t.get('expand', 0.0) + t.get('adv', 0.0) + t.get('update', 0.0))}")
    if VAL_KEY in metrics:
        ci = f" [{metrics[VAL_LOW]:.3f}, {metrics[VAL_HIGH]:.3f}]" if VAL_LOW in metrics else ""
        parts.append(f"eval {metrics[VAL_KEY]:.3f}{ci} in {_s(t.get('eval', 0.0))}")
    if metrics.get("audit/divergence"):
        parts.append("AUDIT DIVERGENCE")
    return f"step {int(metrics['step'])}/{total}: " + " · ".join(parts) + f" · {_s(t.get('step', 0.0))}"


class Counter:
    """The items of a counted phase: ``total`` once it is known, ``advance`` as each one is done
    (``info``: what to show beside the count, e.g. the mean reward so far). Shows nothing."""

    def total(self, n: int) -> None:
        """The phase has ``n`` items."""

    def advance(self, info: str = "") -> None:
        """One more item is done."""


class _LineCounter(Counter):
    """A line at every tenth of the total, and at least every ``every_s`` seconds, once the phase has
    run ``QUIET_S`` seconds (a phase shorter than that prints nothing: a small file's judge)."""

    QUIET_S = 2.0

    def __init__(self, name: str, say: Callable[[str], None], every_s: float = 30.0) -> None:
        self.name, self._say, self._every = name, say, every_s
        self.done, self._n, self.shown = 0, 0, 0
        self._t0 = self._last = time.perf_counter()

    def total(self, n: int) -> None:
        self._n = n

    def advance(self, info: str = "") -> None:
        self.done += 1
        now = time.perf_counter()
        if now - self._t0 < self.QUIET_S:
            return
        tenth = self._n and self.done * 10 // self._n > (self.done - 1) * 10 // self._n
        if tenth or now - self._last >= self._every or not self.shown:
            self._last = now
            self.shown += 1
            count = f"{self.done}/{self._n}" if self._n else str(self.done)
            self._say(f"{self.name} {count}" + (f" · {info}" if info else "") + f" ({_s(now - self._t0)})")

    def end(self) -> None:
        if self.shown:
            self._say(f"{self.name}: {self.done} done in {_s(time.perf_counter() - self._t0)}")


class _BarCounter(Counter):
    def __init__(self, bars: Any, name: str) -> None:
        self._bars, self._task = bars, bars.add_task(name, total=None, count="", info="")
        self.done, self._n = 0, 0

    def total(self, n: int) -> None:
        self._n = n
        self._bars.update(self._task, total=n, count=f"{self.done}/{n}")

    def advance(self, info: str = "") -> None:
        self.done += 1
        count = f"{self.done}/{self._n}" if self._n else str(self.done)
        self._bars.update(self._task, completed=self.done, count=count, info=info)


class Progress:
    """The interface, showing nothing (ranks other than 0)."""

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A phase of the run (setup, checkpoint, summary): shown while it runs, with its time."""
        yield

    @contextmanager
    def counted(self, name: str) -> Iterator[Counter]:
        """A phase of many items (a rollout's episodes): shown as a count while it runs."""
        yield Counter()

    def sft(self, k: int, total: int, loss: float | None = None) -> None:
        """Warm-start step ``k`` of ``total`` finished with ``loss`` (``k`` = 0: the warm start begins)."""

    def start_steps(self, total: int, done: int) -> None:
        """RL steps begin: ``done`` of ``total`` are already done (a resumed run)."""

    def step_phase(self, step: int, name: str) -> None:
        """RL step ``step`` enters phase ``name`` (rollout, judge, update)."""

    def step(self, metrics: dict[str, Any]) -> None:
        """An RL step finished with ``metrics``."""

    def note(self, text: str) -> None:
        """One line to show now (an evaluation's result, a warning)."""

    def close(self) -> None:
        """Stop drawing (the run ended or failed)."""


class LineProgress(Progress):
    """Plain lines, flushed as they are printed (logs, pipes, ``--no-progress``)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._total = 0
        self._sft_t0: float | None = None

    def _print(self, text: str) -> None:
        print(text, file=self._stream or sys.stderr, flush=True)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        self._print(f"{name} ...")
        yield
        self._print(f"{name}: done in {_s(time.perf_counter() - t0)}")

    @contextmanager
    def counted(self, name: str) -> Iterator[Counter]:
        counter = _LineCounter(name, self._print)
        yield counter
        counter.end()

    def sft(self, k: int, total: int, loss: float | None = None) -> None:
        if k == 0 or self._sft_t0 is None:
            self._sft_t0 = time.perf_counter()
        if k == 0:
            self._print(f"warm start: {total} supervised steps on oracle trajectories ...")
        elif k == 1 or k % max(1, total // 10) == 0 or k == total:
            elapsed = _s(time.perf_counter() - self._sft_t0)
            self._print(f"warm start {k}/{total}: loss {loss:.4f} ({elapsed})")

    def start_steps(self, total: int, done: int) -> None:
        self._total = total
        self._print(f"RL steps {done + 1} to {total}" + (f" (resumed after step {done})" if done else ""))

    def step(self, metrics: dict[str, Any]) -> None:
        self._print(step_line(metrics, self._total))

    def note(self, text: str) -> None:
        self._print(text)


class LiveProgress(Progress):
    """A rich display: a spinner per setup phase, bars for the warm start and the RL steps."""

    def __init__(self, stream: TextIO | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bars

        self._bars = Bars(
            SpinnerColumn(finished_text="[green]✓"),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=Console(file=stream or sys.stderr),
        )
        self._bars.start()
        self._sft: Any = None
        self._train: Any = None
        self._total = 0
        self._reward = "-"

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        task = self._bars.add_task(name, total=None, count="", info="")
        t0 = time.perf_counter()
        yield
        self._bars.update(task, total=1, completed=1, info=f"done in {_s(time.perf_counter() - t0)}")
        self._bars.stop_task(task)

    @contextmanager
    def counted(self, name: str) -> Iterator[Counter]:
        counter = _BarCounter(self._bars, name)
        yield counter
        self._bars.stop_task(counter._task)

    def sft(self, k: int, total: int, loss: float | None = None) -> None:
        if self._sft is None:
            self._sft = self._bars.add_task("warm start", total=total, count="", info="")
        info = f"loss {loss:.4f}" if loss is not None else ""
        self._bars.update(self._sft, completed=k, count=f"{k}/{total}", info=info)
        if k == total:
            self._bars.stop_task(self._sft)

    def start_steps(self, total: int, done: int) -> None:
        self._total = total
        self._train = self._bars.add_task(
            "train", total=total, completed=done, count=f"{done}/{total}", info="reward -"
        )

    def step_phase(self, step: int, name: str) -> None:
        if self._train is not None:
            self._bars.update(self._train, info=f"reward {self._reward} · step {step}: {name}")

    def step(self, metrics: dict[str, Any]) -> None:
        if self._train is None:
            return
        step = int(metrics["step"])
        self._reward = f"{metrics.get(REWARD_KEY, 0.0):.3f}"
        self._bars.update(
            self._train, completed=step, count=f"{step}/{self._total}", info=f"reward {self._reward}"
        )

    def note(self, text: str) -> None:
        self._bars.console.print(text, markup=False, highlight=False)

    def close(self) -> None:
        self._bars.stop()


def make_progress(live: bool, stream: TextIO | None = None) -> Progress:
    """``LiveProgress`` when ``live`` and the stream (default stderr) is a terminal, else
    ``LineProgress``."""
    out = stream or sys.stderr
    if live and out.isatty():
        return LiveProgress(stream)
    return LineProgress(stream)
