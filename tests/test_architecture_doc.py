"""``docs/architecture.md`` is the layer table the tests enforce, and the package docstrings say
nothing about layers or imports that the table contradicts (issue 40, item 5)."""

from __future__ import annotations

import ast
import re

from tests.architecture import architecture_doc
from tests.test_package import LAYERS, PKG, ROOT


def test_the_document_is_the_enforced_table():
    assert (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8") == architecture_doc(), (
        "docs/architecture.md is stale: python -m tests.architecture > docs/architecture.md"
    )


def _docstring(package: str) -> str:
    path = PKG / package / "__init__.py"
    if not path.exists():
        path = PKG / f"{package}.py"
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def test_a_docstring_that_names_its_layer_names_the_enforced_one():
    wrong = {}
    for package, layer in LAYERS.items():
        doc = _docstring(package)
        for said in re.findall(r"\b[Ll]ayer (-?\d+(?:\.\d+)?)", doc):
            if float(said) != float(layer):
                wrong[package] = (said, layer)
    assert wrong == {}, "package docstrings that give another layer than tests/test_package.py"


def test_no_docstring_lists_its_imports():
    """What a package may import is the table's to say (a list in a docstring went stale twice)."""
    listing = [p for p in LAYERS if re.search(r"imports only|layer -?[\d.]+: imports", _docstring(p))]
    assert listing == []
