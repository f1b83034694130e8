"""Fixtures for the token tests: trained tokenizers (cached per session) and expanders per family."""

from __future__ import annotations

import functools

import pytest

from agentrl.tokens import Expander
from tests.tokens.fixtures import make_tokenizer_cached


def cached_tokenizer(family: str):  # type: ignore[no-untyped-def]
    return make_tokenizer_cached(family)  # type: ignore[arg-type]


@functools.cache
def cached_expander(family: str, check: str = "off") -> Expander:
    return Expander(cached_tokenizer(family), check=check)  # type: ignore[arg-type]


@pytest.fixture(params=["chatml", "llama3", "glm"])
def family(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def tok(family: str):  # type: ignore[no-untyped-def]
    return cached_tokenizer(family)


@pytest.fixture
def chatml():  # type: ignore[no-untyped-def]
    return cached_tokenizer("chatml")
