"""The report's HTML tables: one markup for every section (cells come in as HTML, escaped before)."""

from __future__ import annotations

__all__ = ["table"]


def table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """A ``<table class=cls>`` with ``head`` as its header cells and ``rows`` as its body. Cells are
    already HTML (escape before)."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'
