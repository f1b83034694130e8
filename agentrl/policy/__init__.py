"""Policies (layer 2): produce assistant turns, with TITO data where the backend samples tokens.

``make_policy("oracle", noise=0.1)`` or ``make_policy("openai:MODEL", api_base=...)``. The ``hf``
policy (a local transformers model or an ``agentrl train`` run, ``--policy hf:PATH``) samples with
the trainer's own engine and reads a run's config, so it lives in the training layer:
``agentrl.train.load_hf_policy``.
"""

from __future__ import annotations

import inspect
from typing import Any

from agentrl.errors import ConfigError
from agentrl.policy.base import EpisodeContext, Policy
from agentrl.policy.oracle import OraclePolicy

__all__ = ["EpisodeContext", "OraclePolicy", "Policy", "make_policy"]


def _construct(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``cls(*args, **kwargs)`` with only the keyword arguments its constructor accepts (a CLI passes
    every policy option; each policy takes its own)."""
    accepted = inspect.signature(cls).parameters
    return cls(*args, **{k: v for k, v in kwargs.items() if k in accepted})


#: The ``--policy`` forms, as the CLI lists them.
POLICY_FORMS = "oracle, openai:MODEL, litellm:MODEL, hf:PATH"


def make_policy(spec: str, **kwargs: Any) -> Policy:
    """A policy from a CLI spec: ``oracle``, ``openai:MODEL`` or ``litellm:MODEL``.

    Keyword arguments go to the policy's constructor when it accepts them (``noise`` for the
    oracle; ``api_base``, ``api_key``, ``temperature``, ``max_tokens`` for openai and litellm);
    None values are dropped.
    """
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    kind, _, model = spec.partition(":")
    if kind == "oracle":
        return _construct(OraclePolicy, **kwargs)
    if kind in ("openai", "litellm"):
        if not model:
            raise ConfigError(f"--policy: {kind} needs a model name, as {kind}:MODEL")
        if kind == "openai":
            from agentrl.policy.openai import OpenAIPolicy as cls
        else:
            from agentrl.policy.litellm_policy import LiteLLMPolicy as cls
        return _construct(cls, model, **kwargs)
    if kind == "hf":  # a transformers model in this process: it needs torch, a layer above this one
        raise ConfigError(
            f"--policy {spec!r}: make_policy builds chat policies only; load hf:PATH with "
            "agentrl.train.load_hf_policy (agentrl rollout does)"
        )
    raise ConfigError(f"--policy: unknown policy {spec!r}; expected one of {POLICY_FORMS}")
