"""A recognisable "real" OpenAI key in the environment, for the tests that check where keys go."""

import pytest

REAL = "sk-real-openai-secret"


@pytest.fixture(autouse=True)
def real_openai_key_in_env(monkeypatch):
    """``$OPENAI_API_KEY`` set to ``REAL``, and no OpenAI base URL in the environment (imported into
    a test module, it applies to every test there)."""
    monkeypatch.setenv("OPENAI_API_KEY", REAL)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
