"""Shared pieces: a tiny model and tokenizer, and fake vLLM servers that are always closed."""

from __future__ import annotations

import pytest

from agentrl.train.models import build_tiny_model
from tests.policy_vllm.fake_vllm import FakeVLLM
from tests.tokens.fixtures import make_tokenizer_cached

TINY_SPEC = "tiny:layers=1,hidden=32,heads=2,kv_heads=1"


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer_cached("chatml")


@pytest.fixture(scope="module")
def model(tok):
    return build_tiny_model(len(tok), TINY_SPEC, seed=3).eval()


@pytest.fixture
def fake():
    """``fake(**kw)`` starts a ``FakeVLLM``; every server is closed after the test."""
    servers: list[FakeVLLM] = []

    def start(**kw) -> FakeVLLM:
        servers.append(FakeVLLM(**kw))
        return servers[-1]

    yield start
    for s in servers:
        s.close()
