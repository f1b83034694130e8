"""The models that ship with agentrl, named ``base:NAME``.

A base is a transformers directory inside the package (``base_models/NAME``: weights, config,
tokenizer and ``card.json``, the model card of the script run that made it). ``model.path:
base:NAME`` in a training config and ``--policy hf:base:NAME`` on the command line name one; both
become the directory's path here, the one place that knows where bases live, and a saved config
names the base again (``spec_of``), so a run's files do not depend on where agentrl is installed.

``base:research-tiny``: the research base, a 2-layer causal LM with a copy head pretrained by
``python -m agentrl.train.research_base`` on generated worlds that name none of the examples'
companies (its card says with which settings, losses, copy accuracies, wall time and CPU).
"""

from __future__ import annotations

from pathlib import Path

from agentrl.errors import ConfigError

__all__ = ["BASES_DIR", "PREFIX", "base_names", "resolve_base", "resolve_model", "spec_of"]

PREFIX = "base:"
#: Where the shipped bases live (package data).
BASES_DIR = Path(__file__).with_name("base_models")


def base_names() -> list[str]:
    """The names of the shipped bases (directories with a ``config.json``), sorted."""
    if not BASES_DIR.is_dir():
        return []
    return sorted(p.name for p in BASES_DIR.iterdir() if (p / "config.json").is_file())


def resolve_base(spec: str) -> Path:
    """``base:NAME`` → the directory of that shipped base; a name no base has is a ``ConfigError``
    listing the names there are."""
    if not spec.startswith(PREFIX):
        raise ValueError(f"{spec!r} is not a base: spec")
    name = spec[len(PREFIX) :]
    there = BASES_DIR / name
    if not name or Path(name).name != name or name.startswith(".") or not (there / "config.json").is_file():
        known = ", ".join(f"{PREFIX}{n}" for n in base_names()) or "none"
        raise ConfigError(f"{spec!r}: agentrl ships no such base (bases: {known})")
    return there


def resolve_model(spec: str) -> str:
    """A model spec with ``base:NAME`` replaced by its directory's path; any other spec as it is."""
    return str(resolve_base(spec)) if spec.startswith(PREFIX) else spec


def spec_of(path: str) -> str:
    """``base:NAME`` for the directory of a shipped base, any other path as it is: what a saved
    config records, so a run's config and checkpoints name the base, not where this machine
    installed it."""
    try:
        there = Path(path).resolve()
    except (OSError, RuntimeError, ValueError):
        return path
    if there.parent == BASES_DIR.resolve() and (there / "config.json").is_file():
        return PREFIX + there.name
    return path
