"""``AgentSettings``: what every adapter needs from us, whichever engine's config carries it.

The env (an ``env.yaml`` mapping: suite, backends, budgets), the judge (a ``JudgeConfig`` mapping,
needed only for rubrics with LLM criteria), which reward to train on (``normalize``, as the native
trainer's ``judge.normalize``), the per-turn token limit, the longest model call (``max_len``), how
a long episode's context is rewritten (``context``, the native trainer's ``rollout.context``) and
the chat-template options.
verl passes it as the ``agentrl:`` block of its agent-loop YAML, TRL and SkyRL as a dict or path.
"""

from __future__ import annotations

import inspect
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrl.env import ResearchEnv
from agentrl.errors import ConfigError, TemplateError
from agentrl.rollout.context import ContextConfig, ContextPolicy, context_policy
from agentrl.tokens import Expander, SamplingSpec, sampling_spec
from agentrl.yamlload import load_yaml, read_text

__all__ = ["AgentSettings", "expander_for", "load_settings"]


class AgentSettings(BaseModel):
    """Our side of an engine integration."""

    model_config = ConfigDict(extra="forbid")

    env: dict[str, Any] = Field(default_factory=dict)
    """The ``ResearchEnv`` config (``env.yaml`` keys: ``suite``, ``search``, ``fetch``, ``budgets`` ...)."""
    judge: dict[str, Any] | None = None
    """A ``JudgeConfig`` mapping (``model``, ``api_base`` ...) for rubrics with LLM criteria; None
    leaves such answers unscored (excluded from training), never scored 0."""
    normalize: bool = True
    """Train on the judge's normalised [0, 1] score rather than the rubric total: the native
    trainer's ``judge.normalize``, with its default (``agentrl.trajectory.training_reward``)."""
    max_new_tokens: int = Field(1024, ge=1)
    """Token limit of one assistant turn (the engine's own response budget caps the episode)."""
    max_len: int | None = Field(None, ge=16)
    """Most tokens of one model call (prompt + turn): an episode whose next call would pass it ends
    (``max_len``), and context management rewrites before it. None: no such limit (the engine's
    response budget still ends the episode)."""
    context: ContextConfig = Field(default_factory=ContextConfig)
    """How a long episode's context is rewritten (``strategy``, ``trigger_tokens``,
    ``keep_last_turns``), as the native trainer's ``rollout.context``. A rewritten episode is
    handed over as one sample per context segment: verl and SkyRL (step-wise) take them; TRL
    refuses them (docs/integrations.md)."""
    template_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Options for every chat-template render, e.g. ``{enable_thinking: false}``."""

    @property
    def rewrites_context(self) -> bool:
        """Whether episodes may be split into context segments (a strategy other than ``none``)."""
        return self.context.strategy != "none"

    def context_policy(self) -> ContextPolicy:
        """The episode loop's ``ContextPolicy`` for ``context``."""
        return context_policy(self.context)

    def make_env(self) -> ResearchEnv:
        """A fresh env (backends and indexes are shared per process, so this is cheap)."""
        return ResearchEnv(self.env)

    def make_judge(self) -> Any | None:
        """Our ``Judge`` when a judge model is configured, else None."""
        if not self.judge:
            return None
        from agentrl.judge import make_judge

        return make_judge(self.judge, source="agentrl.judge")


def load_settings(
    data: AgentSettings | dict[str, Any] | str | Path | None, source: str = "<settings>"
) -> AgentSettings:
    """Validate settings from a mapping (an OmegaConf node works once converted), a YAML path or
    None (defaults: the embedded sandbox). Raises ``ConfigError`` naming the field."""
    if isinstance(data, AgentSettings):
        return data
    if isinstance(data, str | Path):
        source = str(data)
        text = read_text(Path(data), error=ConfigError, missing="no such file", what="agentrl settings")
        data = load_yaml(text, source, error=ConfigError)[0] or {}
    if data is not None and not isinstance(data, dict):
        try:  # an OmegaConf DictConfig (verl, SkyRL) without importing omegaconf here
            from omegaconf import OmegaConf

            data = OmegaConf.to_container(data, resolve=True)
        except Exception as e:
            raise ConfigError(
                f"{source}: agentrl settings must be a mapping, got {type(data).__name__}"
            ) from e
    try:
        return AgentSettings.model_validate(data or {})
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{source}: agentrl.{where}: {err['msg']}") from None


_EXPANDERS: dict[tuple[int, str], Expander] = {}
# Expander options that are not template options (``chat_template`` is both, and goes to both).
_EXPANDER_OPTIONS = frozenset(
    name
    for name, p in inspect.signature(Expander.__init__).parameters.items()
    if name not in ("self", "tokenizer", "chat_template") and p.kind is not inspect.Parameter.VAR_KEYWORD
)
_LOCK = threading.Lock()


def expander_for(tokenizer: Any, **template_kwargs: Any) -> Expander:
    """One ``Expander`` per (tokenizer, template options) per process: construction runs the
    template self-test, and an engine builds one agent loop per sample. It is the expander of the
    model's ``SamplingSpec`` (``agentrl.tokens.sampling_spec``: the template's end-of-turn ∪ the
    EOS ids of the tokenizer and of the ``generation_config.json`` saved beside it), as the native
    trainer's is."""
    key = (id(tokenizer), repr(sorted(template_kwargs.items())))
    with _LOCK:
        exp = _EXPANDERS.get(key)
        if exp is None or exp.tokenizer is not tokenizer:
            opts = {k: v for k, v in template_kwargs.items() if k in _EXPANDER_OPTIONS}
            renders = {k: v for k, v in template_kwargs.items() if k not in _EXPANDER_OPTIONS}
            given = opts.pop("stop_token_ids", None) or ()  # more stop ids: added to the spec's
            try:
                spec = sampling_spec(tokenizer, extra=given, **renders)
            except TemplateError:  # no stop id at all: the expander reads turns without one
                spec = SamplingSpec(frozenset(int(i) for i in given))
            exp = spec.expander(tokenizer, **opts, **renders)
            _EXPANDERS[key] = exp
        return exp
