"""Errors of the token expander, in agentrl's one hierarchy (``agentrl.errors``)."""

from __future__ import annotations

from agentrl.errors import AgentRLError, ConfigError

__all__ = ["ForkError", "TemplateError", "TokenCheckError"]


class TemplateError(ConfigError):
    """The chat template failed the expander's self-test (it is not append-only in a way the
    expander cannot handle, or it renders in a way the expander cannot split); the message says why."""


class TokenCheckError(AgentRLError):
    """``check="strict"`` or ``"ignore_whitespace"`` found expanded ids that differ from a full
    render of the conversation; the message lists the differing segments."""


class ForkError(AgentRLError):
    """``on_fork="error"``: the template would rewrite earlier turns of this trajectory, so a
    chat-API rollout showed the model a different history than the appended token sequence."""
