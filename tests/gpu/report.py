"""The GPU kit's report: what each section measured (or why it did not), as JSON and as Markdown.

A section records into a ``Recorder``: figures (one number or word each), tables (rows of figures,
one row per variant measured) and checks (an acceptance condition and whether it held) — only what
this run measured — and, apart from them, references: figures measured elsewhere to compare with
(a CPU run's, say), each with where they come from, when and on what machine. With a
``path``, every record is written to that file at once (atomically), so a section killed at its time
budget still leaves what it had measured. ``Report`` holds every section's ``SectionResult``;
``Report.write(out)`` writes ``report.json`` and ``report.md`` (the same data, rendered).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

__all__ = [
    "Check",
    "Recorder",
    "Reference",
    "Report",
    "SectionResult",
    "Value",
    "load_result",
    "render_markdown",
]

Value = float | int | str | bool | None
Status = Literal["pending", "ok", "failed", "skipped", "timeout"]


class Check(BaseModel):
    """An acceptance condition of a section, and whether it held (``detail`` says on what)."""

    ok: bool
    detail: str = ""


class Reference(BaseModel):
    """Figures measured elsewhere, kept beside a section's own to compare with (never mixed into its
    ``figures``); a figure named as one the section measures compares with that one."""

    figures: dict[str, Value]
    source: str = Field(description="where the figures were published, and the command that produced them")
    date: str = Field(description="when they were measured, ISO 8601")
    machine: str = Field(description="what they were measured on: the CPU (or card), its cores, its load")


class SectionResult(BaseModel):
    """One section of the kit: its status, why (when not ok), its time and what it measured; the
    references it compares with are apart (``references``)."""

    name: str
    title: str = ""
    status: Status = "pending"
    reason: str | None = Field(None, description="why the section was skipped, failed or cut")
    seconds: float | None = None
    budget_s: float | None = None
    figures: dict[str, Value] = Field(default_factory=dict)
    tables: dict[str, list[dict[str, Value]]] = Field(default_factory=dict)
    checks: dict[str, Check] = Field(default_factory=dict)
    references: dict[str, Reference] = Field(default_factory=dict)


class Report(BaseModel):
    """The whole kit's run: where it ran, with what budget, and each section in the order run."""

    schema_version: int = 2
    """2: reference figures moved out of a section's ``figures`` into its ``references``."""
    mode: Literal["gpu", "dry-run"]
    device: str = Field(description="the card's name (torch.cuda.get_device_name), or 'cpu'")
    date: str = Field(description="UTC date and time the kit started, ISO 8601")
    command: str = ""
    budget_s: float | None = Field(None, description="the kit's total time budget; None: unlimited")
    seconds: float | None = None
    sections: list[SectionResult] = Field(default_factory=list)

    def write(self, out: Path) -> None:
        """Write ``report.json`` and ``report.md`` into ``out`` (each atomically)."""
        out.mkdir(parents=True, exist_ok=True)
        _atomic(out / "report.json", self.model_dump_json(indent=2))
        _atomic(out / "report.md", render_markdown(self))


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _finite(v: Value) -> Value:
    """Non-finite floats as strings: JSON has no NaN or infinity (and a NaN is a finding to show)."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


class Recorder:
    """What a running section records; every call writes the result to ``path`` when one is given."""

    def __init__(self, result: SectionResult, path: Path | None = None) -> None:
        self.result = result
        self.path = path

    def figure(self, key: str, value: Value) -> None:
        self.result.figures[key] = _finite(value)
        self.flush()

    def figures(self, values: dict[str, Value], prefix: str = "") -> None:
        for k, v in values.items():
            self.result.figures[prefix + k] = _finite(v)
        self.flush()

    def row(self, table: str, values: dict[str, Value]) -> None:
        self.result.tables.setdefault(table, []).append({k: _finite(v) for k, v in values.items()})
        self.flush()

    def reference(self, name: str, ref: Reference) -> None:
        """Record figures measured elsewhere (``ref``, with its provenance) to compare with."""
        self.result.references[name] = ref.model_copy(
            update={"figures": {k: _finite(v) for k, v in ref.figures.items()}}
        )
        self.flush()

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.result.checks[name] = Check(ok=bool(ok), detail=detail)
        self.flush()
        return bool(ok)

    def skip(self, reason: str) -> None:
        """Mark the section skipped, with the reason (the runner keeps it)."""
        self.result.status, self.result.reason = "skipped", reason
        self.flush()

    def flush(self) -> None:
        if self.path is not None:
            _atomic(self.path, self.result.model_dump_json())


def _fmt(v: Value) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        if v == 0 or 1e-3 <= abs(v) < 1e5:
            return f"{v:.4g}"
        return f"{v:.3e}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v).replace("|", "\\|").replace("\n", " ")


WIDE = 10  # a table with more columns is shown transposed: one line per figure, one column per row


def _table(rows: list[dict[str, Value]]) -> list[str]:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    if len(cols) > WIDE:  # headed by each row's first value (its variant)
        head, rest = cols[0], cols[1:]
        out = [
            f"| {head} | " + " | ".join(_fmt(r.get(head, "")) for r in rows) + " |",
            "|---" * (len(rows) + 1) + "|",
        ]
        return out + [f"| {c} | " + " | ".join(_fmt(r.get(c, "")) for r in rows) + " |" for c in rest]
    out = ["| " + " | ".join(cols) + " |", "|---" * len(cols) + "|"]
    return out + ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]


def render_markdown(report: Report) -> str:
    """The report as Markdown: a summary table of the sections, then each section's checks, figures,
    tables and references (each beside this run's figure of the same name), in the order they ran."""
    lines = [
        f"# agentrl GPU acceptance kit: {report.device}, {report.date}",
        "",
        f"Mode `{report.mode}`, budget "
        + (f"{report.budget_s:.0f} s" if report.budget_s is not None else "unlimited")
        + (f", ran {report.seconds:.0f} s" if report.seconds is not None else "")
        + (f". Command: `{report.command}`" if report.command else ""),
        "",
        "| section | status | seconds | reason |",
        "|---|---|---|---|",
    ]
    for s in report.sections:
        secs = "" if s.seconds is None else f"{s.seconds:.1f}"
        secs += f" / {s.budget_s:.0f}" if s.seconds is not None and s.budget_s is not None else ""
        lines.append(f"| {s.name} | {s.status} | {secs} | {_fmt(s.reason or '')} |")
    for s in report.sections:
        lines += ["", f"## {s.name}: {s.title}" if s.title else f"## {s.name}", "", f"Status: **{s.status}**"]
        if s.reason:
            lines[-1] += f" ({s.reason})"
        if s.checks:
            lines += ["", "| check | held | detail |", "|---|---|---|"]
            lines += [
                f"| {k} | {'yes' if c.ok else '**no**'} | {_fmt(c.detail)} |" for k, c in s.checks.items()
            ]
        if s.figures:
            lines += ["", "| figure | value |", "|---|---|"]
            lines += [f"| {k} | {_fmt(v)} |" for k, v in s.figures.items()]
        for name, rows in s.tables.items():
            lines += ["", f"**{name}**", "", *_table(rows)]
        for name, ref in s.references.items():
            lines += [
                "",
                f"**reference: {name}** (not measured by this run: {_fmt(ref.source)}; {_fmt(ref.date)}; "
                f"{_fmt(ref.machine)})",
                "",
                "| figure | reference | this run |",
                "|---|---|---|",
            ]
            lines += [f"| {k} | {_fmt(v)} | {_fmt(s.figures.get(k, '–'))} |" for k, v in ref.figures.items()]
    return "\n".join(lines) + "\n"


def load_result(path: Path) -> SectionResult | None:
    """A section's partial result file, or None when it wrote none (or a torn one)."""
    try:
        return SectionResult.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None
