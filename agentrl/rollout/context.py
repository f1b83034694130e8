"""How the episode loop keeps a long episode within ``max_len``: ``ContextPolicy``.

``strategy: none`` (the default) lets the conversation grow until the next prompt would pass
``max_len``, which ends the episode (``max_len``). The others rewrite the context first, before a
turn whose prompt plus ``max_new_tokens`` would pass ``trigger_tokens``
(``agentrl.trajectory.context`` has the rules):

- ``drop_observations`` (trigger default: ``max_len``): every tool result but those after the last
  ``keep_last_turns`` assistant turns is shown as a one-line stub;
- ``summarize`` (trigger default: ``max_len - max_new_tokens``, room for the request and the
  summary): the policy writes notes on what it has found (a sampled turn of at most
  ``max_new_tokens``, trained like any other), and the context restarts from the system prompt and
  the task with the notes, then the last ``keep_last_turns`` turns verbatim. When the summary call
  itself would pass ``max_len`` (a turn and its tool result grew the prompt past the headroom), the
  older tool results are stubbed first (a ``drop_observations`` rewrite, recorded), so the notes
  are written from what is left; set ``trigger_tokens`` lower to keep the headroom.

Each rewrite starts a new context segment, recorded on the trajectory; the expander gives one exact
training row per segment. It acts in token mode (where the loop counts tokens); a chat policy sees
the whole conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["NO_CONTEXT_POLICY", "STRATEGIES", "ContextConfig", "ContextPolicy", "context_policy"]

#: The strategies, one spelling for the loop's policy, the config model and their messages.
Strategy = Literal["none", "drop_observations", "summarize"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)


@dataclass(frozen=True)
class ContextPolicy:
    """See the module docstring."""

    strategy: Strategy = "none"
    trigger_tokens: int | None = None
    keep_last_turns: int = 1

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"context strategy must be one of {', '.join(STRATEGIES)}, not {self.strategy!r}"
            )
        if self.trigger_tokens is not None and self.trigger_tokens < 1:
            raise ValueError(f"context trigger_tokens must be positive, got {self.trigger_tokens}")
        if self.keep_last_turns < 1:  # 0 would stub the result the next turn is about to act on
            raise ValueError(f"context keep_last_turns must be >= 1, got {self.keep_last_turns}")

    def trigger(self, max_len: int | None, max_new_tokens: int | None = None) -> int | None:
        """The prompt-plus-turn size that calls for a rewrite (None: never); never above ``max_len``,
        where the episode would end instead."""
        if self.strategy == "none":
            return None
        if self.trigger_tokens is None:
            if max_len is not None and self.strategy == "summarize":
                return max(1, max_len - (max_new_tokens or 0))
            return max_len
        return self.trigger_tokens if max_len is None else min(self.trigger_tokens, max_len)


#: The default: no rewrite (an episode that outgrows ``max_len`` ends there).
NO_CONTEXT_POLICY = ContextPolicy()


class ContextConfig(BaseModel):
    """A config's ``context`` block: the trainer's ``rollout.context`` and the adapters'
    ``AgentSettings.context`` (one model, so both take the same keys, defaults and checks);
    ``context_policy`` turns it into the loop's ``ContextPolicy``."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    strategy: Strategy = Field(
        "none",
        description="none: an episode whose next prompt would pass max_len ends there; drop_observations: "
        "old tool results are shown as one-line stubs first; summarize: the policy writes notes on its "
        "research (a sampled, trained turn) and the context restarts from the task with the notes. Each "
        "rewrite starts a new context segment, trained as its own row",
    )
    trigger_tokens: int | None = Field(
        None,
        ge=16,
        description="rewrite when a prompt plus max_new_tokens would pass this (default: max_len; "
        "summarize: max_len - max_new_tokens, room for the request and the notes); at most "
        "max_len (the trainer refuses more)",
    )
    keep_last_turns: int = Field(
        1,
        ge=1,
        description="the last N assistant turns stay whole (drop_observations: their tool results; "
        "summarize: the turns and their results, after the notes)",
    )


def context_policy(settings: Any) -> ContextPolicy:
    """The policy of a config's ``context`` block (any object with ``strategy``, ``trigger_tokens``
    and ``keep_last_turns``, e.g. ``ContextConfig``)."""
    return ContextPolicy(settings.strategy, settings.trigger_tokens, settings.keep_last_turns)
