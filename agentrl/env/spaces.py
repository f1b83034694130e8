"""A gymnasium space for free text: any ``str`` up to a length (gymnasium's ``Text`` only accepts
its fixed charset, which model output does not respect)."""

from __future__ import annotations

import string
from typing import Any

import gymnasium

__all__ = ["FreeText"]

_SAMPLE_CHARS = string.ascii_letters + string.digits + string.punctuation + " \n"


class FreeText(gymnasium.Space[str]):
    """Any Python string of at most ``max_length`` characters."""

    def __init__(self, max_length: int = 10_000_000, seed: int | None = None):
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Free text has no fixed-size array form."""
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A short random printable string (for ``check_env`` and smoke tests)."""
        n = int(self.np_random.integers(0, 64))
        idx = self.np_random.integers(0, len(_SAMPLE_CHARS), size=n)
        return "".join(_SAMPLE_CHARS[i] for i in idx)

    def contains(self, x: Any) -> bool:
        """True for a ``str`` no longer than ``max_length``."""
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"FreeText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FreeText) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash(("FreeText", self.max_length))
