"""What is wrong with a training config, all at once: every problem pydantic found, each on its own
line with where it was written (``FILE:LINE:COL`` or the ``--set`` flag), and for a key that is not
a setting the nearest one that is ("did you mean ``max_turns``?"), so a config with two typos takes
one run to fix, not two."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from agentrl.yamlload import dotted

__all__ = ["describe", "section_of", "setting_paths", "settings_at"]


def section_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field's annotation holds (``AuditConfig | None`` included): the section it
    opens, or None for a value."""
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def settings_at(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The keys a mapping at ``loc`` (a path of keys below ``model``) accepts; [] when ``loc`` does
    not lead to a section."""
    for key in loc:
        field = model.model_fields.get(str(key))
        sub = section_of(field.annotation) if field is not None else None
        if sub is None:
            return []
        model = sub
    return [f.alias or name for name, f in model.model_fields.items()]


def setting_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every setting below ``model`` as its path of keys (sections and the values in them)."""
    paths = []
    for name, field in model.model_fields.items():
        path = (*prefix, field.alias or name)
        paths.append(path)
        sub = section_of(field.annotation)
        if sub is not None:
            paths += setting_paths(sub, path)
    return paths


def _nearest_anywhere(key: str, model: type[BaseModel]) -> str | None:
    """The dotted path of the setting anywhere in the config whose own name is nearest ``key``
    (``max_turn`` written at the top level: ``rollout.max_turns``)."""
    paths = setting_paths(model)
    near = difflib.get_close_matches(key, [p[-1] for p in paths], n=1, cutoff=0.75)
    return next((dotted(p) for p in paths if near and p[-1] == near[0]), None)


def describe(
    e: ValidationError,
    model: type[BaseModel],
    where: Callable[[tuple[str | int, ...]], str],
) -> str:
    """Every error of ``e`` as ``WHERE: field: problem`` lines (``where(loc)`` names the file position
    or the flag), unknown keys with the nearest setting. One problem gives one line."""
    lines = []
    for err in e.errors():
        loc = tuple(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            known = settings_at(model, loc[:-1])
            near = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            if not near and (anywhere := _nearest_anywhere(str(loc[-1]), model)) is not None:
                near = [anywhere]  # a setting of another section
            msg = "not a setting" + (f"; did you mean {near[0]!r}?" if near else "")
            if known and not near:  # a short section lists its settings; --print-config has all
                msg += f" (settings here: {', '.join(sorted(known))})" if len(known) <= 12 else ""
        lines.append(f"{where(loc)}: {dotted(loc)}: {msg}")
    if len(lines) > 1:
        lines.insert(0, f"{len(lines)} problems in the config:")
    return "\n".join(lines)
