"""The env configuration: the typed form of an ``env.yaml`` (and of ``gymnasium.make(..., config=...)``).

Every key is optional; with no config the env runs on the generated sandbox suite. Unknown keys are
errors that name the field, so a typo in ``env.yaml`` never silently falls back to a default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrl.errors import ConfigError

__all__ = [
    "Budgets",
    "CacheConfig",
    "EnvConfig",
    "FetchConfig",
    "SearchConfig",
    "load_env_config",
    "merge_env_config",
    "read_env_yaml",
]


def merge_env_config(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, section by section: a mapping merges into the mapping it
    replaces (``budgets: {tool_timeout_s: 30}`` keeps the other budgets), anything else replaces."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge_env_config(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchConfig(_Strict):
    """Where ``search`` goes: the suite's local BM25 index, or an HTTP search API."""

    backend: Literal["sandbox", "http"] = "sandbox"
    api: Literal["searxng", "retrieve"] = "searxng"
    """HTTP flavour: SearXNG's ``GET /search?format=json`` or Search-R1's ``POST /retrieve``."""
    url: str | None = None
    """Base URL of the HTTP search service (``http`` backend only)."""
    timeout_s: float = 10.0
    retries: int = 2
    allow_private: bool = True
    """The search service is one the user configured, usually on their own network."""


class FetchConfig(_Strict):
    """Where ``open_url`` goes: the suite's corpus, or the web over HTTP (with the SSRF guard)."""

    backend: Literal["sandbox", "http"] = "sandbox"
    allow_private: bool = False
    """Opt out of the SSRF guard (for a user's own intranet corpus)."""
    allow_addresses: list[str] = Field(default_factory=list)
    """Non-public ``ip`` or ``ip:port`` let through the guard one by one (narrower than ``allow_private``)."""
    timeout_s: float = 10.0
    max_bytes: int = 5_000_000
    max_redirects: int = 5
    retries: int = 1
    user_agent: str = "agentrl/0.1 (research agent)"


class CacheConfig(_Strict):
    """Record/replay of every tool call in sqlite."""

    mode: Literal["off", "record", "replay"] = "off"
    path: str | None = None


class Budgets(_Strict):
    """Episode budgets; hitting one truncates the episode with the reason in ``info``."""

    max_turns: int = Field(12, ge=1)
    max_tool_calls: int = Field(24, ge=1)
    max_obs_chars: int = Field(6000, ge=100)
    """Characters of one tool observation; longer outputs are cut with a marker."""
    max_total_chars: int = Field(120_000, ge=1000)
    """Characters of the whole conversation (prompt, turns and observations)."""
    tool_timeout_s: float = Field(30.0, gt=0)
    """Wall-clock limit of one tool call; a slower call is an error observation."""


class EnvConfig(_Strict):
    """The whole env configuration; ``suite`` is a directory or the name ``sandbox``."""

    suite: str = "sandbox"
    split: str = "train"
    """The suite's tasks this env draws and rollouts run: ``train`` (every task of a suite that names
    no splits), ``heldout`` (tasks kept out of training) or ``all``. ``reset(options={"task": id})``
    may still name any task of the suite."""
    search: SearchConfig = Field(default_factory=SearchConfig)
    fetch: FetchConfig = Field(default_factory=FetchConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    budgets: Budgets = Field(default_factory=Budgets)
    tool_format: Literal["hermes", "search_r1", "openai", "auto"] = "hermes"
    """How the system prompt asks for tool calls (``auto`` asks as ``hermes``). Calls in the
    ``openai``, ``hermes`` and ``search_r1`` formats are run whatever this says; other model
    families' formats (Llama-3 JSON and ``<|python_tag|>``, Mistral ``[TOOL_CALLS]``, a fenced JSON
    block) are run with ``auto`` and answered with a format error otherwise: never a final answer."""
    send_tools: bool | None = None
    """Whether chat policies send the tool schemas in each request's ``tools`` (function calling);
    None: when ``tool_format`` is ``openai``. ``agentrl rollout --send-tools/--no-send-tools`` sets it."""
    page_chars: int = Field(3000, ge=200)
    """Characters per page of ``open_url`` output."""
    search_k: int = Field(5, ge=1, le=50)
    tool_error_rate: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a tool call fails with an injected error (robustness training)."""
    judge: Literal["deterministic", "inline", "deferred"] = "deferred"
    """How the final answer is scored. Deterministic rubrics are scored in ``step`` in every mode;
    for a rubric with LLM criteria: ``deferred`` leaves it to a batched judge later (reward 0 in
    ``step``, ``info["reward_status"] == "needs_judge"``), ``inline`` calls the LLM judge in ``step``
    (needs ``judge_model``), and ``deterministic`` refuses it (a config error at ``reset``)."""
    judge_model: str | None = None
    judge_api_base: str | None = None
    turn_credit: Literal["none", "evidence"] = "none"
    """Per-turn credit (docs/training.md, "Turn credit"). ``evidence``: a scored episode records in
    ``info["turn_credit"]`` the share of its reward each assistant turn earned by opening the page
    that printed a figure the report was paid for (``agentrl.judge.credit``); the expander moves that
    share from the outcome onto the turn, so the episode's total is unchanged. ``none``: no credit."""
    system_prompt: str | None = None
    """Overrides the built-in system prompt; ``{date}`` and ``{tools}`` are filled in."""


def read_env_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping of an ``env.yaml`` file, not yet validated (callers may add keys, such as a CLI's
    ``--suite``, before ``load_env_config``). Read by ``agentrl.yamlload`` (its size cap, duplicate
    keys and errors at file:line:column); raises ``ConfigError`` naming the file."""
    from agentrl.yamlload import load_yaml, read_text

    path = Path(path)
    text = read_text(path, error=ConfigError, missing="no such file", what="env config")
    raw = load_yaml(text, str(path), error=ConfigError)[0] or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: an env config must be a mapping, got {type(raw).__name__}")
    return raw


def load_env_config(
    data: dict[str, Any] | str | Path | EnvConfig | None, source: str = "<config>"
) -> EnvConfig:
    """Validate a config dict, a path to an ``env.yaml``, or pass an ``EnvConfig`` through.

    Raises ``ConfigError`` naming the source and the offending field.
    """
    if isinstance(data, EnvConfig):
        return data
    if data is None:
        return EnvConfig()
    if isinstance(data, str | Path):
        source, data = str(data), read_env_yaml(data)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: an env config must be a mapping, got {type(data).__name__}")
    try:
        return EnvConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        raise ConfigError(f"{source}: {loc}: {err['msg']}") from None
