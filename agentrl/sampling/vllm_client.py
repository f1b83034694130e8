"""Token-in-token-out generation from a vLLM OpenAI-compatible server (``/v1/completions``).

The trainer's rollouts send the exact prompt ids the training row will hold (``prompt`` as a list
of ints), ask for the sampled ids (``return_token_ids``, vLLM ≥ 0.10.2; ``return_tokens_as_token_ids``
as a fallback in the logprobs) and one logprob per sampled token, and stop on the tokenizer's stop
ids. Stop tokens are kept as sampled, as in the HF path. vLLM returns the *raw* model logprobs
unless the server runs with ``--logprobs-mode processed_logprobs``; ``logprobs_processed=False``
says it does not, and then logprobs sampled at a temperature other than 1 (or with top-p) are not
kept, so the trainer recomputes them instead of training on the wrong distribution.

``check_version`` reads ``GET /version`` and refuses servers outside ``SUPPORTED_VLLM``. A prompt
the server's ``--max-model-len`` cannot hold raises ``ContextOverflow`` at once (never retried); the
trainer's generate function ends that episode truncated (``agentrl.sampling.vllm_engine``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from agentrl.errors import AgentRLError, ConfigError
from agentrl.policy.server_reply import ContextOverflow, is_context_overflow

__all__ = [
    "SUPPORTED_VLLM",
    "Generation",
    "VLLMClient",
    "VLLMError",
    "VLLMVersionError",
    "check_version",
    "parse_version",
    "server_root",
]

# The range whose API (completion fields, LoRA and dev-mode routes) docs/vllm.md lists as verified.
SUPPORTED_VLLM = ((0, 10, 2), (0, 34, 0))
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


class VLLMError(AgentRLError):
    """The vLLM server refused or failed a request after the bounded retries."""


class VLLMVersionError(ConfigError):
    """The vLLM server's version is outside the supported range (or it reports none)."""


def parse_version(text: str) -> tuple[int, int, int]:
    """``'0.11.1'``, ``'0.10.2rc1'``, ``'0.12.0.dev5+g1234'`` → ``(major, minor, patch)``."""
    m = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise VLLMVersionError(f"vLLM reported version {text!r}, which is not a version number")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def _fmt(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


def check_version(text: str) -> tuple[int, int, int]:
    """Parse ``text`` and raise ``VLLMVersionError`` unless ``SUPPORTED_VLLM[0] ≤ version < SUPPORTED_VLLM[1]``."""
    v = parse_version(text)
    low, high = SUPPORTED_VLLM
    if not low <= v < high:
        raise VLLMVersionError(
            f"vLLM {text} is not supported: agentrl's vLLM engine needs vllm>={_fmt(low)},<{_fmt(high)} "
            "(pip install 'agentrl[gpu]'; see docs/vllm.md)"
        )
    return v


def server_root(base_url: str) -> str:
    """The server root of ``base_url`` (a trailing ``/v1`` is dropped): routes such as ``/version``
    and ``/collective_rpc`` live there, the OpenAI API under ``/v1``."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


@dataclass
class Generation:
    """One sampled turn: ``token_ids`` ``[n]`` as sampled (stop token included when one was
    sampled), ``logprobs`` ``[n]`` of the sampling distribution or None when unknown, and
    ``finish_reason`` (``stop`` or ``length``)."""

    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str


def _parse_choice(choice: dict[str, Any]) -> tuple[list[int], list[float] | None]:
    lp = choice.get("logprobs") or {}
    logprobs = lp.get("token_logprobs")
    ids = choice.get("token_ids")
    if ids is None and lp.get("tokens") is not None:
        parsed = [_TOKEN_ID.match(str(t)) for t in lp["tokens"]]
        if not all(parsed):
            raise VLLMError("the completion carries neither token_ids nor token_id:N logprob tokens")
        ids = [int(p.group(1)) for p in parsed]  # type: ignore[union-attr]
    if ids is None:
        raise VLLMError("the completion carries no token ids (is the server vLLM ≥ 0.10.2?)")
    ids = [int(i) for i in ids]
    if logprobs is not None:
        if len(logprobs) != len(ids) or any(x is None for x in logprobs):
            raise VLLMError(f"{len(logprobs)} logprobs for {len(ids)} sampled tokens")
        logprobs = [float(x) for x in logprobs]
    return ids, logprobs


class VLLMClient:
    """An async client of one vLLM server; use as ``async with VLLMClient(...) as c``.

    ``base_url`` is the server root or its ``/v1`` URL; ``model`` the served model name (the
    weight sync may switch it to a freshly loaded LoRA adapter). Transport errors, 429 and 5xx are
    retried ``retries`` times with exponential backoff; ``max_connections`` bounds concurrency.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        retries: int = 3,
        max_connections: int = 64,
        logprobs_processed: bool = True,
    ) -> None:
        self.root = server_root(base_url)
        self.model = model
        self.timeout_s = timeout_s
        self.retries = retries
        self.max_connections = max_connections
        self.logprobs_processed = logprobs_processed
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> VLLMClient:
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s)),
            headers=self._headers,
            limits=httpx.Limits(
                max_connections=self.max_connections, max_keepalive_connections=self.max_connections
            ),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """``method path`` with a JSON body; the decoded JSON answer (None when empty). Raises
        ``VLLMError`` on a 4xx at once and on transport errors/429/5xx after the retries, and
        ``ContextOverflow`` at once when the server says the prompt outgrew its context."""
        assert self._http is not None, "use `async with VLLMClient(...)`"
        url, last = self.root + path, ""
        for attempt in range(self.retries + 1):
            try:
                resp = await self._http.request(method, url, json=body)
                if resp.status_code < 400:
                    return resp.json() if resp.content else None
                last = f"HTTP {resp.status_code}: {resp.text[:300]}"
                if is_context_overflow(resp.text):
                    raise ContextOverflow(f"{method} {url}: {' '.join(last.split())}")
                if resp.status_code != 429 and resp.status_code < 500:
                    break
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
            if attempt < self.retries:
                await asyncio.sleep(min(8.0, 0.5 * 2**attempt))
        raise VLLMError(f"{method} {url}: {last}")

    async def version(self) -> str:
        """The server's vLLM version string (``GET /version``)."""
        data = await self.request("GET", "/version")
        if not isinstance(data, dict) or not isinstance(data.get("version"), str):
            raise VLLMVersionError(f"{self.root}/version did not report a vLLM version: {data!r}")
        return data["version"]

    async def check_version(self) -> str:
        """The server's version, after checking it is in ``SUPPORTED_VLLM`` (else ``VLLMVersionError``)."""
        v = await self.version()
        check_version(v)
        return v

    async def generate(
        self,
        prompt_ids: Sequence[int],
        *,
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_ids: Sequence[int] = (),
    ) -> Generation:
        """Sample one continuation of ``prompt_ids`` (``[P]`` ints) of at most ``max_tokens`` tokens."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [int(i) for i in prompt_ids],
            "max_tokens": int(max_tokens),
            "temperature": float(temperature),
            "top_p": float(top_p),
            # token_logprobs holds the sampled token's own logprob; 1 rather than 0 because some
            # vLLM versions answered logprobs=0 with no logprobs at all (vllm-project/vllm#3707).
            "logprobs": 1,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "stop_token_ids": sorted(int(i) for i in stop_ids),
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
            "n": 1,
        }
        if seed is not None:
            body["seed"] = int(seed)
        data = await self.request("POST", "/v1/completions", body)
        try:
            choice = data["choices"][0]
            finish = choice.get("finish_reason") or "length"
        except (KeyError, IndexError, TypeError) as e:
            raise VLLMError(f"{self.root}/v1/completions: not a completion: {e}") from None
        ids, logprobs = _parse_choice(choice)
        if finish not in ("stop", "length"):
            raise VLLMError(f"{self.root}/v1/completions: unexpected finish_reason {finish!r}")
        if not self.logprobs_processed and (temperature != 1.0 or top_p < 1.0):
            logprobs = None  # raw model logprobs are not the sampling distribution's
        reason = choice.get("stop_reason")
        if finish == "stop" and isinstance(reason, int) and (not ids or ids[-1] != reason):
            # The stop token was sampled but left out of the ids: put it back (the training row
            # must hold what the model produced); its logprob is unknown, so the turn's are dropped.
            ids, logprobs = [*ids, reason], None
        return Generation(ids, logprobs, finish)
