"""``docs/architecture.md``, generated from the layer table that ``tests/test_package.py`` enforces
(``LAYERS``, ``ALLOWED``) and each package's own docstring, so the document cannot drift from the
code: ``tests/test_architecture_doc.py`` fails when the file differs from what this prints.

    python -m tests.architecture > docs/architecture.md
"""

from __future__ import annotations

import ast

from tests.test_package import ALLOWED, LAYERS, PKG

INTRO = """\
# Architecture

agentrl is one pipeline, and its packages follow it: tasks go to the environment (`env`), whose
episodes the one loop runs (`rollout`) with a policy (`policy`, or a model sampled by `sampling`);
finished episodes are trajectories (`trajectory`), scored by the judge (`judge`) and expanded into
exact training tokens (`tokens`); `learn` computes what an update needs from them, `train` runs the
loop, `eval` scores policies, and `replay`, `explain` and `integrations` reuse those parts on stored
trajectories and inside other RL engines. `cli` is the `agentrl` command.

A module imports only from lower layers, and only the packages its row lists:
`tests/test_package.py` enforces this table (every import in the package, inside functions too),
and this page is generated from it and from each package's docstring (`python -m
tests.architecture > docs/architecture.md`; a test fails when they differ). Heavy libraries (torch,
transformers, litellm) are imported where they are used, so `agentrl --help` and the config checks
load without them.

| layer | package | what it holds | may import |
|---|---|---|---|
"""


def summary(package: str) -> str:
    """The first paragraph of the package's (or module's) docstring, on one line."""
    path = PKG / package / "__init__.py"
    if not path.exists():
        path = PKG / f"{package}.py"
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")


def _layer(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else str(n)


def architecture_doc() -> str:
    """The whole of ``docs/architecture.md``."""
    rows = []
    for package in sorted(LAYERS, key=lambda p: (LAYERS[p], p)):
        allowed = ALLOWED[package] - {""}
        imports = (
            "everything (lazily, per command)"
            if package == "cli"
            else (", ".join(f"`{m}`" for m in sorted(allowed)) or "no other agentrl package")
        )
        rows.append(f"| {_layer(LAYERS[package])} | `{package}` | {summary(package)} | {imports} |")
    return INTRO + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(architecture_doc(), end="")
