"""Where a training config's input paths are: as given (from the working directory), else beside
the config file, so a config kept beside its suite and rubric runs from anywhere."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError

__all__ = ["INPUT_PATHS", "is_hub_id", "resolve_input", "resolve_paths"]


#: The config's input paths (files or directories the run reads), dotted; ``rollout.env.cache.path``
#: (a tool-call cache, replayed or recorded) is taken from the config's directory when it is there,
#: and is no error when it is nowhere (a recording creates it).
INPUT_PATHS: tuple[str, ...] = (
    "rollout.suite",
    "judge.rubric",
    "model.path",
    "model.tokenizer",
    "rollout.env.suite",
    "rollout.env.cache.path",
    "eval.suite",
    "eval.audit.rubric",
)
_MAY_BE_NEW = frozenset({"rollout.env.cache.path"})


def resolve_input(value: str, base: Path | None) -> tuple[Path | None, list[Path]]:
    """Where a configured input path is: as given (from the working directory), else relative to
    ``base`` (the config file's directory). Returns (the existing path or None, where it looked)."""
    p = Path(value).expanduser()
    tried = [p if p.is_absolute() else Path.cwd() / p]
    if p.exists():
        return p, tried
    if base is not None and not p.is_absolute():
        there = base.resolve() / p
        if there.exists():
            return there, [*tried, there]
        if there != tried[0]:
            tried.append(there)
    return None, tried


def is_hub_id(value: str) -> bool:
    """Whether a model or tokenizer name can be a Hugging Face hub id (``name`` or ``org/name``)
    rather than only a local path."""
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", value) is not None and ".." not in value


def resolve_paths(data: dict[str, Any], base: Path) -> None:
    """Relative input paths that do not exist from the working directory are taken relative to the
    config file, so a config runs from anywhere; a path found in neither place is a ``ConfigError``
    (message: ``section.key ...``) listing where it looked. Built-in names (``sandbox``, ``tiny:``, ``base:``)
    and hub ids are left as they are."""
    for dotted in INPUT_PATHS:
        *parents, key = dotted.split(".")
        sub: Any = data
        for p in parents:
            sub = sub.get(p) if isinstance(sub, dict) else None
        value = sub.get(key) if isinstance(sub, dict) else None
        if not isinstance(value, str) or value == "sandbox" or value.startswith("tiny:"):
            continue
        if dotted == "model.path" and value.startswith("base:"):  # ModelConfig resolves it
            continue
        found, tried = resolve_input(value, base)
        if found is not None:
            sub[key] = value if found == Path(value) else str(found)
        elif dotted not in _MAY_BE_NEW and not (dotted.startswith("model.") and is_hub_id(value)):
            where = " or ".join(str(t) for t in tried)
            raise ConfigError(f"{dotted} {value!r}: not found (looked for {where})")
