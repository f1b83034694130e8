"""Rubric files: the YAML schema, its pydantic models and a loader whose errors name file:line:column.

A rubric is data: an id, a verdict→score ``mapping``, an ``aggregation`` and a list of criteria,
each with a weight, a kind (a ``positive`` quality or a ``negative`` flaw) and a grader (the LLM
judge by default, or a deterministic one). ``load_rubric`` reads YAML with the safe loader and
validates it with pydantic; every error names ``path:line:column: field: what was expected``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import regex
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agentrl.errors import RubricError
from agentrl.judge.bounds import compile_pattern
from agentrl.yamlload import Key, Marks, indexed, load_yaml, read_text

__all__ = [
    "CitedSourceGrader",
    "ContainsGrader",
    "Criterion",
    "FigureGrader",
    "Grader",
    "LLMGrader",
    "NotContainsGrader",
    "NumberGrader",
    "RegexGrader",
    "Rubric",
    "load_rubric",
    "parse_rubric",
]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def _check_id(v: str) -> str:
    """Rubric and criterion ids: ASCII letters, digits, '_', '.', '-', starting with a letter or digit."""
    if not _ID.match(v):
        raise ValueError(
            "an id is ASCII letters (A-Z, a-z), digits, '_', '.', '-' and starts with a letter or digit"
        )
    return v


Id = Annotated[str, AfterValidator(_check_id)]


def _not_bool(v: Any) -> Any:
    """YAML's ``true``/``false`` are not numbers (pydantic would read them as 1 and 0)."""
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got a boolean ({str(v).lower()})")
    return v


#: A finite number that is not a boolean.
Number = Annotated[float, BeforeValidator(_not_bool), Field(allow_inf_nan=False)]

#: The bounds of a criterion's |weight|: wide enough for any points scale, and they keep every total
#: and ratio finite (a 1 MiB rubric holds at most ~50,000 criteria; ``agentrl.yamlload``).
MIN_WEIGHT, MAX_WEIGHT = 1e-6, 1e6

#: Scale words the ``number`` grader understands, lower-case, with their multipliers.
UNIT_WORDS: dict[str, float] = {
    "": 1.0,
    "k": 1e3,
    "thousand": 1e3,
    "m": 1e6,
    "mn": 1e6,
    "mm": 1e6,
    "mln": 1e6,
    "million": 1e6,
    "b": 1e9,
    "bn": 1e9,
    "bln": 1e9,
    "billion": 1e9,
    "t": 1e12,
    "tn": 1e12,
    "trillion": 1e12,
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LLMGrader(_Strict):
    """Graded by the LLM judge (the default)."""

    type: Literal["llm"] = "llm"


class RegexGrader(_Strict):
    """Fully Satisfied when ``pattern`` (Python ``re`` syntax) matches somewhere in the report.

    It runs on the ``regex`` engine within the report's time limit (``agentrl.judge.bounds``).
    """

    type: Literal["regex"]
    pattern: str
    ignore_case: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)  # the syntax the docs promise, and what the backtracking lint parses
            compile_pattern(v, False)  # the engine that grades (``agentrl.judge.bounds``)
        except (re.error, regex.error) as e:
            raise ValueError(f"not a valid regular expression: {e}") from None
        except RecursionError:
            raise ValueError("not a valid regular expression: nested too deeply") from None
        return v


class ContainsGrader(_Strict):
    """Fully Satisfied when the report contains the text (``all`` of a list, or ``any`` of it)."""

    type: Literal["contains"]
    text: str | list[str]
    match: Literal["all", "any"] = "all"
    case_sensitive: bool = False

    @field_validator("text")
    @classmethod
    def _non_empty(cls, v: str | list[str]) -> str | list[str]:
        items = [v] if isinstance(v, str) else v
        if not items or any(not s for s in items):
            raise ValueError("needs a non-empty string or a non-empty list of non-empty strings")
        return v


class NotContainsGrader(ContainsGrader):
    """Fully Satisfied when the report contains none of the texts."""

    type: Literal["not_contains"]  # type: ignore[assignment]


def _unit_ok(v: str) -> str:
    if v.strip().lower() not in UNIT_WORDS:
        raise ValueError(f"unknown unit {v!r}; expected one of {sorted(k for k in UNIT_WORDS if k)}")
    return v.strip().lower()


class NumberGrader(_Strict):
    """Fully Satisfied when the report states ``value`` (times ``unit``) within the tolerance.

    Numbers in the report are read with their scale words (``$12.3 billion``, ``12.3bn``,
    ``12,300 million``, ``12.3B``) and compared after scaling by the unit ``u``:
    ``|x - v·u| <= max(abs_tolerance·u, tolerance·|v·u|)`` (``tolerance`` is relative,
    ``abs_tolerance`` is in the rubric's unit).
    """

    type: Literal["number"]
    value: Number
    unit: str = ""
    tolerance: Number = Field(default=0.01, ge=0)
    abs_tolerance: Number = Field(default=0.0, ge=0)

    @field_validator("unit")
    @classmethod
    def _known_unit(cls, v: str) -> str:
        return _unit_ok(v)


#: Grader fields added after rubrics were first hashed: grader type → field → its default.
_LATER_FIELDS: dict[str, dict[str, Any]] = {"figure": {"opened": False}}


class FigureGrader(_Strict):
    """Evidence: the report states the asked figure, as the one figure for it, seen in a tool result.

    Fully Satisfied when the report states ``value`` (times ``unit``, tolerances as for ``number``),
    states no *other* figure within a factor ``band`` of it that the agent never saw in a tool
    result (a spray of guesses, or a second estimate of the same quantity, earns nothing), and,
    with ``sourced``, the figure itself appears in a tool result of the episode (no reward for a
    figure the agent did not find). With ``opened`` it must be printed on a page the agent opened
    (``open_url``), not only in a search snippet: a multi-source task pays for each figure only once
    its source was read. With a ``unit``, only amounts with a currency sign or a scale word count
    as figures (``$12.3 billion``, ``12.3bn``); without one, every number but a year.
    """

    type: Literal["figure"]
    value: Number
    unit: str = ""
    tolerance: Number = Field(default=0.01, ge=0)
    abs_tolerance: Number = Field(default=0.0, ge=0)
    band: Number = Field(default=1.5, ge=1.0)
    sourced: bool = True
    opened: bool = False

    @field_validator("unit")
    @classmethod
    def _known_unit(cls, v: str) -> str:
        return _unit_ok(v)


class CitedSourceGrader(_Strict):
    """Evidence: every ``\\cite{key}`` names a page the agent opened, and that page prints the figures
    the citation is attached to (the figures between the previous citation and this one).

    A key names a page by its URL, or through ``sources`` (cite key → URL, e.g. a corpus id).
    Fully Satisfied when the report has at least one citation, each cited key names a page opened
    in this episode (an ``open_url`` call that returned the page), every figure attached to a
    citation is printed on one of the pages it cites, and at least one citation carries a figure.
    """

    type: Literal["cited_source"]
    sources: dict[str, str] = Field(default_factory=dict)


Grader = Annotated[
    LLMGrader
    | RegexGrader
    | ContainsGrader
    | NotContainsGrader
    | NumberGrader
    | FigureGrader
    | CitedSourceGrader,
    Field(discriminator="type"),
]

#: Grader types that read what the agent did (the trajectory), not only the report.
EVIDENCE_GRADERS: tuple[str, ...] = ("figure", "cited_source")


class Criterion(_Strict):
    """One rubric item: a positive quality (weight > 0) or a negative flaw (weight < 0)."""

    id: Id
    text: str
    weight: Number
    kind: Literal["positive", "negative"] = "positive"
    grader: Grader = Field(default_factory=LLMGrader)
    requires: list[Id] = Field(default_factory=list)
    """Ids of positive criteria that must hold (be Fully Satisfied) for this one to count."""

    @field_validator("text")
    @classmethod
    def _text_ok(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the criterion text must not be empty")
        return v.strip()

    @field_validator("weight")
    @classmethod
    def _weight_bounds(cls, v: float) -> float:
        if v != 0 and not MIN_WEIGHT <= abs(v) <= MAX_WEIGHT:  # 0: the sign check names it
            raise ValueError(f"|weight| must be between {MIN_WEIGHT:g} and {MAX_WEIGHT:g}, got {v:g}")
        return v

    @model_validator(mode="after")
    def _weight_sign(self) -> Criterion:
        if self.kind == "positive" and not self.weight > 0:
            raise ValueError("weight: a positive criterion needs a positive weight")
        if self.kind == "negative" and not self.weight < 0:
            raise ValueError("weight: a negative criterion needs a negative weight")
        return self

    @property
    def is_llm(self) -> bool:
        """True when the LLM judge grades this criterion."""
        return self.grader.type == "llm"


class Rubric(_Strict):
    """A validated rubric. ``content_hash`` (sha256 of the canonical JSON) names its exact content."""

    id: Id
    version: Annotated[int, BeforeValidator(_not_bool)] = 1
    description: str = ""
    mapping: Literal["strict", "ternary", "binary"] = "strict"
    aggregation: Literal["weighted_sum", "normalized"] = "weighted_sum"
    criteria: list[Criterion]

    @field_validator("criteria")
    @classmethod
    def _criteria_ok(cls, v: list[Criterion]) -> list[Criterion]:
        if not v:
            raise ValueError("a rubric needs at least one criterion")
        seen: set[str] = set()
        for i, c in enumerate(v):
            if c.id in seen:
                raise ValueError(f"[{i}].id: duplicate criterion id {c.id!r}")
            seen.add(c.id)
        return v

    @model_validator(mode="after")
    def _requires_ok(self) -> Rubric:
        by_id = {c.id: (i, c) for i, c in enumerate(self.criteria)}
        for i, c in enumerate(self.criteria):
            for r in c.requires:
                if r not in by_id:
                    raise ValueError(f"[{i}].requires: unknown criterion {r!r}")
                if by_id[r][1].kind != "positive":
                    raise ValueError(
                        f"[{i}].requires: {r!r} is a negative criterion; only positive ones can hold"
                    )
        cycle = _find_cycle({c.id: list(c.requires) for c in self.criteria})
        if cycle:
            i = by_id[cycle[0]][0]
            raise ValueError(f"[{i}].requires: cycle {' -> '.join(cycle)}")
        return self

    @model_validator(mode="after")
    def _normalizable(self) -> Rubric:
        if self.aggregation == "normalized" and not any(c.weight > 0 for c in self.criteria):
            raise ValueError("criteria: 'normalized' aggregation needs at least one positive criterion")
        return self

    @cached_property
    def content_hash(self) -> str:
        """sha256 (hex) of the rubric's canonical JSON: same content, same hash, whatever the YAML layout.
        A grader field added after rubrics were first hashed counts only when it is not its default
        (``_LATER_FIELDS``), so a rubric that does not use it keeps its hash (and its cached verdicts)."""
        data = self.model_dump(mode="json")
        for c in data.get("criteria", []):
            g = c.get("grader") or {}
            for name, default in _LATER_FIELDS.get(g.get("type"), {}).items():
                if g.get(name) == default:
                    g.pop(name, None)
        canon = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode("utf-8")).hexdigest()

    @property
    def uses_evidence(self) -> bool:
        """True when a criterion reads the trajectory (pages opened, tool results), not only the report."""
        return any(c.grader.type in EVIDENCE_GRADERS for c in self.criteria)

    @property
    def is_deterministic(self) -> bool:
        """True when no criterion needs the LLM judge."""
        return not any(c.is_llm for c in self.criteria)

    @property
    def max_score(self) -> float:
        """The highest attainable total: Σ of positive weights (``weighted_sum``) or 1 (``normalized``)."""
        if self.aggregation == "normalized":
            return 1.0
        return sum(c.weight for c in self.criteria if c.weight > 0)

    @property
    def min_score(self) -> float:
        """The lowest attainable total: Σ of negative weights (``weighted_sum``) or 0 (``normalized``)."""
        if self.aggregation == "normalized":
            return 0.0
        return sum(c.weight for c in self.criteria if c.weight < 0)


def _find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """A cycle of ``requires`` edges as ``[a, b, ..., a]``, or None (iterative DFS, colours)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for start in graph:
        if state.get(start):
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = [start]
        state[start] = 1
        while stack:
            node, k = stack[-1]
            if k < len(graph[node]):
                stack[-1] = (node, k + 1)
                nxt = graph[node][k]
                if state.get(nxt) == 1:
                    return [*path[path.index(nxt) :], nxt]
                if not state.get(nxt):
                    state[nxt] = 1
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                state[node] = 2
                stack.pop()
                path.pop()
    return None


# ---- errors at YAML positions (the document is read by agentrl.yamlload) -------------------------


def _locate(path: Key, marks: Marks, source: str) -> str:
    for n in range(len(path), -1, -1):
        if path[:n] in marks:
            line, col = marks[path[:n]]
            return f"{source}:{line}:{col}"
    return source


def _clean_loc(loc: tuple[Any, ...]) -> Key:
    # Pydantic puts the discriminator tag ('regex', ...) and validator names into loc; drop them.
    out: list[str | int] = []
    for i, p in enumerate(loc):
        if isinstance(p, str) and i > 0 and loc[i - 1] == "grader":
            continue
        out.append(p)
    return tuple(out)


_TYPES = "llm, regex, contains, not_contains, number, figure, cited_source"


def _validate(data: Any, source: str, marks: Marks) -> Rubric:
    if not isinstance(data, dict):
        raise RubricError(
            f"{_locate((), marks, source)}: <root>: a rubric must be a mapping (id, criteria, ...)"
        )
    try:
        return Rubric.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        path = _clean_loc(tuple(err["loc"]))
        msg = str(err["msg"]).removeprefix("Value error, ")
        # Our validators name the sub-field they are about ("weight: ..." or "[2].id: ...").
        if m := re.match(r"^\[(\d+)\]\.(\w+): (.*)$", msg, re.S):
            path = path or ("criteria",)  # a model-level check (``requires``) names no field
            path, msg = (*path, int(m.group(1)), m.group(2)), m.group(3)
        elif (m := re.match(r"^(weight|criteria): (.*)$", msg, re.S)) is not None:
            path = path if path[-1:] == (m.group(1),) else (*path, m.group(1))
            msg = m.group(2)
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "union_tag_not_found":
            msg = f"a grader needs a 'type' ({_TYPES})"
        elif err["type"] == "union_tag_invalid":
            msg = f"unknown grader type; expected one of {_TYPES}"
        raise RubricError(f"{_locate(path, marks, source)}: {indexed(path)}: {msg}") from None


def parse_rubric(data: dict[str, Any] | str, source: str = "<inline>") -> Rubric:
    """Validate a rubric given as a dict (e.g. inline in a task file) or as YAML text.

    Raises ``RubricError`` naming ``source:line:column: field: problem`` (line and column only
    when the input was YAML text).
    """
    if isinstance(data, dict):
        return _validate(data, source, {})
    if not isinstance(data, str):
        raise RubricError(f"{source}: a rubric must be YAML text or a mapping, got {type(data).__name__}")
    loaded, marks = load_yaml(data, source, error=RubricError, name=indexed)
    if not marks:
        raise RubricError(f"{source}: the rubric is empty")
    return _validate(loaded, source, marks)


def load_rubric(path: str | os.PathLike[str]) -> Rubric:
    """Read and validate one rubric YAML file; raises ``RubricError`` naming the file, line and field."""
    p = Path(path)
    text = read_text(p, error=RubricError, missing="no such rubric file", what="rubric")
    return parse_rubric(text, source=str(p))
