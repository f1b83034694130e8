"""Document bytes to text: HTML with selectolax, PDF with pypdf (both imported lazily)."""

from __future__ import annotations

import io
import re

__all__ = ["html_to_text", "pdf_to_text"]

_BLANKS = re.compile(r"\n\s*\n+")
_SPACES = re.compile(r"[ \t\r\f\v]+")
_DROP = ("script", "style", "noscript", "svg", "nav", "footer", "header", "form", "iframe", "template")
_BLOCK = ("p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "br", "section", "article", "table")


def _tidy(text: str) -> str:
    lines = [_SPACES.sub(" ", line).strip() for line in text.splitlines()]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def html_to_text(html: str) -> tuple[str, str]:
    """The ``(title, text)`` of an HTML document: scripts, styles and navigation dropped, blocks on
    their own lines."""
    try:  # selectolax >= 0.3.13 has the lexbor engine; 1.0 removed the old one
        from selectolax.lexbor import LexborHTMLParser as HTMLParser
    except ImportError:  # pragma: no cover
        from selectolax.parser import HTMLParser  # type: ignore[no-redef]

    tree = HTMLParser(html)
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node else ""
    tree.strip_tags(list(_DROP))
    for tag in _BLOCK:
        for node in tree.css(tag):
            node.insert_after("\n")
    body = tree.body or tree.root
    text = body.text(separator="", strip=False) if body is not None else ""
    return title, _tidy(text)


def pdf_to_text(data: bytes, max_pages: int = 50) -> tuple[str, str]:
    """The ``(title, text)`` of a PDF, page texts separated by blank lines (at most ``max_pages``)."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    meta = reader.metadata
    title = str(meta.title) if meta is not None and meta.title else ""
    parts = []
    for page in reader.pages[:max_pages]:
        parts.append(page.extract_text() or "")
    return title, _tidy("\n\n".join(parts))
