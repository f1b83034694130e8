"""The one loader of the YAML files users write: training configs, rubrics, a suite's ``env.yaml`` and
``sandbox.yaml``, the engine integrations' settings and a run directory's hand-made ``config.yaml``.

Safe loading only. A key given twice in one mapping is an error at its second occurrence (YAML
keeps the last one silently), ``file:line:column: key.path: duplicate key``; every other YAML
problem is one line ``file:line:column: not valid YAML: ...`` wherever PyYAML knows the place,
including a value its safe constructors cannot build (``2020-02-31``, ``!!int abc``). The caller
says which ``AgentRLError`` to raise and how a key path reads (``dotted`` for configs,
``indexed`` for rubrics), and gets back the data and the position of every key path, to name the
line of a later validation error.

Inputs are capped at ``MAX_YAML_BYTES`` (1 MiB, a hundred times the largest rubric or config in
the repository): a larger file, or a device or pipe that goes on past it, is refused before it is
parsed (the pure-Python parser would take minutes and gigabytes on a few hundred megabytes).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from agentrl.errors import AgentRLError

__all__ = ["MAX_YAML_BYTES", "Key", "Marks", "dotted", "indexed", "load_yaml", "read_text"]

#: The most bytes of YAML read from one file or parsed from one text.
MAX_YAML_BYTES = 1 << 20

#: A path into a YAML document: mapping keys (str) and sequence indices (int).
Key = tuple[str | int, ...]
#: 1-based (line, column) of each path: a key's own position, a sequence item's, the root's at ().
Marks = dict[Key, tuple[int, int]]


def dotted(path: Key) -> str:
    """``rollout.max_turns``, ``rollout.stops.0``: how config errors name a field."""
    return ".".join(str(p) for p in path) or "<root>"


def indexed(path: Key) -> str:
    """``criteria[0].grader``: how rubric errors name a field."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<root>"


def _size(n: int) -> str:
    if n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    return f"{n:,} bytes" if n < 10 << 20 else f"{n / (1 << 20):.1f} MiB"


def _too_large(source: str | Path, size: int | None) -> str:
    got = f"{_size(size)}, " if size is not None else "more than that: "
    return f"{source}: {got}over the {_size(MAX_YAML_BYTES)} limit of a YAML input"


def read_text(path: Path, *, error: type[AgentRLError], missing: str, what: str) -> str:
    """The UTF-8 text of ``path``; ``error`` naming the path (and the line of a byte that is not
    UTF-8): ``PATH: {missing}``, ``PATH:LINE: not UTF-8 text: ...``, ``PATH: cannot read the {what}: ...``,
    and for more than ``MAX_YAML_BYTES`` ``PATH: N MiB, over the 1 MiB limit of a YAML input``
    (a regular file by its size, before reading; a device or pipe after the limit's bytes)."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISREG(st.st_mode) and st.st_size > MAX_YAML_BYTES:
                raise error(_too_large(path, st.st_size))
            data = f.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise error(f"{path}: {missing}") from None
    except OSError as e:
        raise error(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    if len(data) > MAX_YAML_BYTES:
        raise error(_too_large(path, None))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = e.object[: e.start].count(b"\n") + 1
        raise error(f"{path}:{line}: not UTF-8 text: {e.reason} (byte {e.start})") from None


class _Loader(yaml.SafeLoader):
    """The safe loader, except that a value its constructors cannot build is a YAML error at its node.

    PyYAML's safe constructors raise plain ``ValueError``/``KeyError``/... for ``2020-02-31``,
    ``!!int abc``, ``!!bool maybe``, an empty ``!!float`` or a 5,000-digit integer.
    """

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, LookupError, AttributeError, ArithmeticError) as e:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read the value {node.value!r:.60}: {e}", node.start_mark
            ) from None


def _marks(node: yaml.Node, source: str, error: type[AgentRLError], name: Callable[[Key], str]) -> Marks:
    """The position of every path in the composed document; ``error`` at a key's second occurrence
    in one mapping. An alias is walked once, at its anchor (no exponential walks)."""
    marks: Marks = {}
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, Key]] = [(node, ())]
    while stack:
        n, path = stack.pop()
        marks.setdefault(path, (n.start_mark.line + 1, n.start_mark.column + 1))
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            keys: set[str] = set()
            for k, v in n.value:
                key = k.value if isinstance(k, yaml.ScalarNode) else repr(k.value)
                line, col = k.start_mark.line + 1, k.start_mark.column + 1
                if key in keys:
                    raise error(f"{source}:{line}:{col}: {name((*path, key))}: duplicate key")
                keys.add(key)
                marks.setdefault((*path, key), (line, col))
                stack.append((v, (*path, key)))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend((v, (*path, i)) for i, v in enumerate(n.value))
    return marks


def load_yaml(
    text: str, source: str, *, error: type[AgentRLError], name: Callable[[Key], str] = dotted
) -> tuple[Any, Marks]:
    """Parse one YAML document: ``(data, marks)``, data None for an empty document. Raises
    ``error`` as one line naming ``source:line:column`` (module docstring); duplicate keys are
    named with ``name``; a text over ``MAX_YAML_BYTES`` is refused unparsed."""
    if len(text) > MAX_YAML_BYTES and len(text.encode("utf-8", "surrogatepass")) > MAX_YAML_BYTES:
        raise error(_too_large(source, len(text.encode("utf-8", "surrogatepass"))))
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # checks the characters at once
        node = loader.get_single_node()
        if node is None:
            return None, {}
        marks = _marks(node, source, error, name)
        return loader.construct_document(node), marks
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise error(f"{where}: not valid YAML: {e.problem or e.context}") from None
    except yaml.reader.ReaderError as e:  # a character YAML does not allow: no mark, but a position
        line, col = text.count("\n", 0, e.position) + 1, e.position - text.rfind("\n", 0, e.position)
        raise error(f"{source}:{line}:{col}: not valid YAML: {e.reason} (#x{e.character:04x})") from None
    except yaml.YAMLError as e:
        raise error(f"{source}: not valid YAML: {e}") from None
    except RecursionError:
        raise error(f"{source}: not valid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
