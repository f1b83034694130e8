"""The config reference, from the pydantic models themselves: ``docs/config.md`` and ``--print-config``.

Every field of ``TrainConfig`` (and of the sections it holds) has a description; this module walks
the models and writes them out, so the reference cannot drift from the code:

- ``config_markdown()``: one table per section (field, type, default, description), the text of
  ``docs/config.md``. ``python -m agentrl.train.config_doc > docs/config.md`` regenerates it, and
  ``tests/train/test_config_doc.py`` fails when the file is out of date.
- ``annotated_yaml(cfg)``: a config's values as YAML with each field's description as a comment
  above it (``agentrl train --print-config``); it loads back as the same config.
"""

from __future__ import annotations

import json
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from agentrl.train.config import TrainConfig
from agentrl.train.config_errors import section_of as _section

__all__ = ["REGENERATE", "Field", "annotated_yaml", "config_markdown", "fields"]

#: The command that writes ``docs/config.md``.
REGENERATE = "python -m agentrl.train.config_doc > docs/config.md"


@dataclass(frozen=True)
class Field:
    """One documented field: its dotted ``path``, ``type`` and ``default`` as a reader writes them,
    its ``description``, and the ``section`` model it opens (None for a value)."""

    path: str
    type: str
    default: str
    description: str
    section: type[BaseModel] | None


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(annotation))
    if annotation is type(None):
        return "null"
    if origin is not None:
        args = ", ".join(_type_name(a) for a in get_args(annotation) if a is not Ellipsis)
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", str(annotation))


def _default(info: Any) -> Any:
    if info.default_factory is not None:
        return info.default_factory()
    return None if info.default is PydanticUndefined else info.default


def fields(model: type[BaseModel] = TrainConfig, prefix: str = "") -> Iterator[Field]:
    """Every field of ``model`` and of the sections under it, depth first, in declaration order."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        section = _section(info.annotation)
        default = _default(info)
        shown = "" if isinstance(default, BaseModel) else json.dumps(_plain(default), ensure_ascii=False)
        description = " ".join((info.description or "").split())
        yield Field(path, _type_name(info.annotation), shown, description, section)
        if section is not None:
            yield from fields(section, f"{path}.")


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, tuple):
        return list(value)
    return value


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def config_markdown() -> str:
    """The text of ``docs/config.md``: every field of ``TrainConfig``, one table per section."""
    out = [
        "# Training config reference",
        "",
        f"<!-- Generated from agentrl/train/config.py and the models it holds: do not edit; run `{REGENERATE}`. -->",
        "",
        "Every field of `agentrl train`'s config (`agentrl.train.TrainConfig`), with its type, default and",
        "description; `agentrl train --print-config` prints the same descriptions beside a config's values.",
        "[training.md](training.md) explains how they work together. A field of a section is set under",
        "the section's key in the YAML file, or as `--set algorithm.name=ppo` on the command line.",
        "",
    ]
    rows: dict[str, list[Field]] = {"": []}
    heads: dict[str, str] = {"": "Top level"}
    for f in fields():
        parent = f.path.rpartition(".")[0]
        rows.setdefault(parent, []).append(f)
        if f.section is not None:
            rows.setdefault(f.path, [])
            heads[f.path] = f"`{f.path}`"
    for key, section_fields in rows.items():
        if not section_fields:
            continue
        out += [f"## {heads[key]}", ""]
        desc = next((f.description for f in fields() if f.path == key), "")
        if desc:
            out += [desc[0].upper() + desc[1:] + ("" if desc.endswith(".") else "."), ""]
        out += ["| field | type | default | description |", "|---|---|---|---|"]
        for f in section_fields:
            name = f.path.rpartition(".")[2]
            default = f"`{f.default}`" if f.default else ""
            if f.section is not None:  # a section, or one that is null unless set (eval.audit)
                below = f"[below](#{f.path.replace('.', '')})"
                default = f"{default} ({below})" if default else below
            out.append(f"| `{name}` | {_cell(f.type)} | {_cell(default)} | {_cell(f.description)} |")
        out.append("")
    return "\n".join(out)


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(text, 100 - len(indent))]


def annotated_yaml(cfg: BaseModel, indent: str = "") -> str:
    """``cfg``'s values as YAML, each field under its description as a comment (``--print-config``).
    Values are written in YAML's flow style, so the text loads back as ``cfg.model_dump(mode="json")``."""
    import yaml

    lines: list[str] = []
    data = cfg.model_dump(mode="json")
    for name, info in type(cfg).model_fields.items():
        lines += _comment(" ".join((info.description or "").split()), indent)
        value = getattr(cfg, name)
        if isinstance(value, BaseModel):
            lines.append(f"{indent}{name}:")
            lines.append(annotated_yaml(value, indent + "  "))
        else:
            text = yaml.safe_dump(data[name], default_flow_style=True, width=10**9, allow_unicode=True)
            text = text.strip().removesuffix("...").strip()  # a scalar document ends with '...'
            lines.append(f"{indent}{name}: {text}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(config_markdown(), end="")
