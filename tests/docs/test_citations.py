"""Every document the shipped files cite is one the repository holds. A rubric, an example or a
docstring that says "see X.md §3" sends a user to a file: it must be there (``REFERENCE.md`` was
once cited by rubrics and examples while it lived only beside the repository)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.docs.snippets import ROOT

# What a user reads: the README, the guides, the package (docstrings, help), what ships to run.
SHIPPED = ("README.md", "BENCHMARKS.md", "docs/", "agentrl/", "examples/", "rubrics/", "envs/")
CITED = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[A-Za-z][\w-]*\.md)\b")


def _shipped_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    names = [n for n in listed.stdout.split() if n.startswith(SHIPPED)]
    return [ROOT / n for n in names if n.endswith((".md", ".py", ".yaml", ".yml", ".json", ".toml"))]


def missing_citations(files: list[Path]) -> dict[str, list[str]]:
    """Cited ``.md`` name → the files citing it, for names found neither beside the citing file, nor
    from the repository root, nor in ``docs/``."""
    out: dict[str, list[str]] = {}
    for f in files:
        for name in CITED.findall(f.read_text(encoding="utf-8", errors="replace")):
            if not any(p.is_file() for p in (f.parent / name, ROOT / name, ROOT / "docs" / name)):
                out.setdefault(name, []).append(f.name)
    return out


def test_every_cited_document_is_in_the_repository():
    files = _shipped_text_files()
    assert len(files) > 100
    assert missing_citations(files) == {}


def test_a_citation_of_an_absent_document_is_found(tmp_path):
    """The check itself: a rubric citing an absent file next to one citing a present file."""
    copy = tmp_path / "r.yaml"
    shipped = (ROOT / "rubrics" / "alphabet-2025-q1-cloud.yaml").read_text()
    copy.write_text("# REFERENCE.md §3, and docs/reference-cases.md §3\n" + shipped)
    assert missing_citations([copy]) == {"REFERENCE.md": ["r.yaml"]}
