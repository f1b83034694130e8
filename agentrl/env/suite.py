"""A suite on disk: ``env.yaml`` (defaults), ``corpus.jsonl`` (pages) and ``tasks.jsonl`` (tasks).

A directory holding a ``sandbox.yaml`` (``seed``, ``companies``) and no corpus is a generated
sandbox: it is built deterministically on first use into the cache directory. The name ``sandbox``
means the default generated suite.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from agentrl.env.config import read_env_yaml
from agentrl.env.sandbox import materialize
from agentrl.errors import ConfigError

__all__ = [
    "ALL_SPLITS",
    "CorpusDoc",
    "Suite",
    "Task",
    "load_suite",
    "parse_date",
    "read_tasks",
    "unload_suite",
]


def parse_date(value: str | dt.date | None) -> dt.date | None:
    """An ISO date (``YYYY-MM-DD``, a longer ISO timestamp is cut to its date) or None."""
    if value is None or isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(str(value)[:10])


class CorpusDoc(BaseModel):
    """One page of a suite's corpus; ``body`` is HTML or text according to ``content_type``."""

    model_config = ConfigDict(extra="forbid")

    id: str
    url: str
    title: str
    date: str
    content_type: Literal["text/html", "application/pdf", "text/plain"] = "text/html"
    kind: str = "page"
    body: str
    world: str | None = None
    """The web the page belongs to (a sandbox built with ``worlds``): only tasks of this world see
    it. None: every task sees it."""


class Task(BaseModel):
    """One task: the prompt, the env clock (``date``), the rubric and the ground truth."""

    model_config = ConfigDict(extra="forbid")

    id: str
    prompt: str
    date: str
    rubric: dict[str, Any] | str
    """An inline rubric mapping, or a path to a rubric YAML relative to the suite directory."""
    ground_truth: dict[str, Any] = {}
    family: str = "default"
    split: str = "train"
    """Which part of the suite the task belongs to: ``train`` (the default) or, conventionally,
    ``heldout`` — tasks that training never draws and evaluation reports apart."""
    world: str | None = None
    """The web the task's episodes research: they search and open only pages of this world (and
    pages of none). None: the whole corpus."""
    metadata: dict[str, Any] = {}

    @property
    def day(self) -> dt.date:
        """The task date as a ``datetime.date``."""
        d = parse_date(self.date)
        assert d is not None
        return d


def read_tasks(path: Path) -> list[Task]:
    """Read ``tasks.jsonl``; a bad line raises ``ConfigError`` naming ``path:line`` and the field."""
    tasks = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                task = Task.model_validate_json(line)
                parse_date(task.date)
            except ValidationError as e:
                err = e.errors()[0]
                loc = ".".join(str(p) for p in err["loc"]) or "<root>"
                raise ConfigError(f"{path}:{lineno}: {loc}: {err['msg']}") from None
            except ValueError as e:
                raise ConfigError(f"{path}:{lineno}: date: {e}") from None
            if task.id in seen:
                raise ConfigError(f"{path}:{lineno}: id: duplicate task id {task.id!r}")
            seen.add(task.id)
            tasks.append(task)
    return tasks


@dataclass
class Suite:
    """A loaded suite: its directory, env.yaml defaults, tasks, and the corpus path."""

    root: Path
    defaults: dict[str, Any]
    tasks: list[Task]
    corpus_path: Path | None

    @property
    def splits(self) -> dict[str, int]:
        """Tasks per split, in the order the splits first appear."""
        out: dict[str, int] = {}
        for t in self.tasks:
            out[t.split] = out.get(t.split, 0) + 1
        return out

    def tasks_in(self, split: str) -> list[Task]:
        """The tasks of one split, in suite order (``all``: every task); ``ConfigError`` when the
        split has none, naming the splits there are."""
        if split == ALL_SPLITS:
            return list(self.tasks)
        picked = [t for t in self.tasks if t.split == split]
        if not picked:
            have = ", ".join(f"{k} ({v})" for k, v in self.splits.items()) or "none"
            raise ConfigError(f"suite {self.root}: no tasks in split {split!r} (its splits: {have})")
        return picked

    def task(self, task_or_id: str | Task | dict[str, Any]) -> Task:
        """A task by id (or a ``Task``/dict passed through); ``ConfigError`` when unknown."""
        if isinstance(task_or_id, Task):
            return task_or_id
        if isinstance(task_or_id, dict):
            try:
                return Task.model_validate(task_or_id)
            except ValidationError as e:
                raise ConfigError(f"options['task']: {e.errors()[0]['msg']}") from None
        for t in self.tasks:
            if t.id == task_or_id:
                return t
        raise ConfigError(f"{self.root}: no task with id {task_or_id!r}")

    def rubric_data(self, task: Task) -> dict[str, Any] | str:
        """The task's rubric as a mapping or YAML text (a path is read relative to the suite)."""
        if isinstance(task.rubric, dict):
            return task.rubric
        path = (self.root / task.rubric).resolve()
        try:
            return path.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"task {task.id}: rubric: cannot read {path}: {e}") from None


_SUITES: dict[str, Suite] = {}

#: The split name that selects every task of a suite.
ALL_SPLITS = "all"


def _default_sandbox_dir() -> Path | None:
    here = Path(__file__).resolve().parents[2] / "envs" / "sandbox"
    return here if (here / "sandbox.yaml").exists() else None


def _read_sandbox_yaml(path: Path) -> Any:
    """The data of a ``sandbox.yaml``, read by ``agentrl.yamlload`` (size cap, duplicate keys and
    errors at file:line:column, as ``ConfigError``)."""
    from agentrl.yamlload import load_yaml, read_text

    text = read_text(path, error=ConfigError, missing="no such file", what="sandbox spec")
    return load_yaml(text, str(path), error=ConfigError)[0] or {}


def load_suite(name_or_path: str | Path) -> Suite:
    """Load (once per process) a suite directory, or the default generated sandbox for ``sandbox``."""
    key = str(name_or_path)
    if key in _SUITES:
        return _SUITES[key]
    if key == "sandbox":
        root = _default_sandbox_dir()
        if root is None:  # installed without the repository's envs/: build the default sandbox
            root = materialize(seed=0, companies=50)
    else:
        root = Path(name_or_path)
    if not root.is_dir():
        raise ConfigError(f"suite {key!r}: not a directory (expected env.yaml, corpus.jsonl, tasks.jsonl)")
    defaults: dict[str, Any] = {}
    if (root / "env.yaml").exists():
        defaults = read_env_yaml(root / "env.yaml")
    data_dir = root
    if (root / "sandbox.yaml").exists() and not (root / "tasks.jsonl").exists():
        spec = _read_sandbox_yaml(root / "sandbox.yaml")
        unknown = sorted(set(spec) - set(_SANDBOX_KEYS)) if isinstance(spec, dict) else []
        if not isinstance(spec, dict) or unknown:
            raise ConfigError(
                f"{root / 'sandbox.yaml'}: expected a mapping of {', '.join(_SANDBOX_KEYS)}"
                + (f"; unknown key {unknown[0]!r}" if unknown else "")
            )
        try:
            data_dir = materialize(
                seed=int(spec.get("seed", 0)),
                companies=int(spec.get("companies", 50)),
                heldout=int(spec.get("heldout_companies", 0)),
                long_horizon=_flag(spec.get("long_horizon", False)),
                worlds=int(spec.get("worlds", 1)),
                exclude_worlds=_worlds(spec.get("exclude_worlds", [])),
                names=str(spec.get("names", "sandbox")),
            )
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{root / 'sandbox.yaml'}: {e}") from None
    tasks_path = data_dir / "tasks.jsonl"
    if not tasks_path.exists():
        raise ConfigError(f"suite {key!r}: {tasks_path} is missing")
    corpus = data_dir / "corpus.jsonl"
    suite = Suite(
        root=data_dir if data_dir != root else root,
        defaults=defaults,
        tasks=read_tasks(tasks_path),
        corpus_path=corpus if corpus.exists() else None,
    )
    _SUITES[key] = suite
    return suite


def unload_suite(name_or_path: str | Path) -> None:
    """Drop ``load_suite``'s cached copy of a suite (a temporary world that is about to be deleted)."""
    _SUITES.pop(str(name_or_path), None)


def read_corpus(path: Path) -> list[CorpusDoc]:
    """Read ``corpus.jsonl``; a bad line raises ``ConfigError`` naming ``path:line``."""
    docs = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                docs.append(CorpusDoc.model_validate(json.loads(line)))
            except (ValidationError, ValueError) as e:
                raise ConfigError(f"{path}:{lineno}: not a corpus document: {e}") from None
    return docs


#: What a ``sandbox.yaml`` may say (``agentrl.env.sandbox.build``'s arguments).
_SANDBOX_KEYS = (
    "seed",
    "companies",
    "heldout_companies",
    "long_horizon",
    "worlds",
    "exclude_worlds",
    "names",
)


def _worlds(value: Any) -> list[tuple[int, int]]:
    """``exclude_worlds``: a list of ``[seed, companies]`` pairs."""
    if not isinstance(value, list) or not all(
        isinstance(w, list) and len(w) == 2 and all(type(x) is int for x in w) for w in value
    ):
        raise ValueError(f"exclude_worlds: expected a list of [seed, companies] pairs, got {value!r}")
    return [(w[0], w[1]) for w in value]


def _flag(value: Any) -> bool:
    """A sandbox.yaml switch: true or false, nothing else (``"no"`` is not false by accident)."""
    if not isinstance(value, bool):
        raise ValueError(f"long_horizon: expected true or false, got {value!r}")
    return value
