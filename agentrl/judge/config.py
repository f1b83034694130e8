"""``JudgeConfig``: which model judges, how hard it is pushed, and what it is shown."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentrl.judge.formats import ResponseFormatMode
from agentrl.trajectory.tools import tools_with_role

__all__ = ["JUDGE_MODEL", "JudgeConfig", "route_model"]

#: The setting a ``MissingSetting`` names when LLM criteria meet a judge without a model.
JUDGE_MODEL = "JudgeConfig(model=...)"


def route_model(model: str, api_base: str | None, providers: Collection[str]) -> str:
    """The litellm model string for ``model``: with ``api_base``, litellm's OpenAI-compatible provider
    (``openai/<model>``) unless the name starts with a litellm provider (``ollama/``, ``hosted_vllm/``,
    ``openai/``, ...; ``providers``). A Hugging Face name such as ``Qwen/Qwen3-8B`` is a model name,
    not a provider: it becomes ``openai/Qwen/Qwen3-8B``. Without ``api_base`` the name is kept."""
    if not api_base:
        return model
    prefix, slash, _ = model.partition("/")
    if slash and prefix in providers:
        return model
    return f"openai/{model}"


class JudgeConfig(BaseModel):
    """Settings of the LLM judge. Deterministic criteria ignore all of them.

    ``model`` is any litellm model string (``openai/gpt-4.1-mini``, ``anthropic/...``); with
    ``api_base`` set, any name that does not start with a litellm provider (``qwen3-8b``,
    ``Qwen/Qwen3-8B``) is sent to that OpenAI-compatible server (vLLM, llama.cpp, Ollama, LM
    Studio) as it is. ``model=None`` is fine for rubrics with only deterministic criteria.
    """

    # The docstrings under the fields are their descriptions (a training config's --print-config).
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    model: str | None = None
    """litellm model string; None when every criterion is deterministic."""
    api_base: str | None = None
    """Base URL of an OpenAI-compatible server, e.g. ``http://127.0.0.1:8000/v1``."""
    api_key: str | None = None
    """API key; defaults to the provider's environment variable (a placeholder for local servers)."""
    concurrency: int = Field(default=16, ge=1)
    """Judge calls in flight at once, across all trajectories."""
    timeout_s: float = Field(default=120.0, gt=0)
    """Per-call timeout in seconds."""
    max_retries: int = Field(default=4, ge=0)
    """Retries of one call on 429, 5xx, timeouts and connection errors (exponential backoff + jitter)."""
    max_parse_retries: int = Field(default=2, ge=0)
    """Extra calls when a reply misses criteria, has unknown verdicts or is not JSON."""
    backoff_base_s: float = Field(default=1.0, ge=0)
    """First backoff delay; doubled each retry, times a random factor in [0.5, 1]."""
    backoff_max_s: float = Field(default=60.0, ge=0)
    """Upper bound of one backoff delay, and of a server's ``Retry-After``."""
    criteria_per_call: int = Field(default=0, ge=0)
    """LLM criteria per call: 0 = all criteria of a trajectory in one call, 1 = one call each."""
    samples: int = Field(default=1, ge=1)
    """Calls per criterion; the verdict is the majority (ties: the median verdict)."""
    temperature: float = 0.0
    """Sampling temperature (0: the judge should be as repeatable as the provider allows)."""
    max_tokens: int | None = None
    """Cap on the reply length (reasoning models need room)."""
    response_format: ResponseFormatMode = "auto"
    """How to ask for the reply's JSON schema: ``auto`` (json_schema, then json_object with the
    schema, then json_object, then none, as the server accepts), ``json_schema``, ``json_object``
    (with the schema, then without), ``none``. ``true``/``false`` mean ``auto``/``none``."""
    include_sources: bool = True
    """Show the judge the tool observations the agent read (see ``source_tools``)."""
    source_tools: tuple[str, ...] | None = tools_with_role("page")
    """Tool names whose observations count as sources (default: the tools that open a page,
    ``open_url``); None = every tool message."""
    max_source_chars: int = Field(default=6000, ge=0)
    """Characters kept of each source."""
    input_cost_per_token: float | None = Field(default=None, ge=0)
    """USD per prompt token; None = litellm's price map (0 with ``api_base``, a local server)."""
    output_cost_per_token: float | None = Field(default=None, ge=0)
    """USD per completion token; None = litellm's price map (0 with ``api_base``)."""
    cache_path: str | None = None
    """sqlite file of cached verdicts; None disables the cache."""
    extra_kwargs: dict[str, object] = Field(default_factory=dict)
    """Passed through to ``litellm.acompletion`` (``extra_body``, ``seed``, ...)."""

    @field_validator("response_format", mode="before")
    @classmethod
    def _format_from_bool(cls, value: Any) -> Any:
        # Configs written when the field was a bool keep working.
        if value is True:
            return "auto"
        if value is False:
            return "none"
        return value

    def litellm_model(self, providers: Collection[str]) -> str:
        """The model string given to litellm: ``route_model`` with litellm's provider prefixes
        (``agentrl.judge.client.litellm_providers()``)."""
        if self.model is None:
            raise ValueError("no judge model configured")
        return route_model(self.model, self.api_base, providers)
