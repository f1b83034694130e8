"""One judge call through ``litellm.acompletion``: bounded concurrency, timeout, retries, accounting.

litellm is imported on first use only (it takes seconds to import and fetches a price map unless
``LITELLM_LOCAL_MODEL_COST_MAP`` is set, which we do). litellm's and the OpenAI SDK's own
retries are switched off so that this module alone decides: 429, 5xx, timeouts and connection
errors are retried with exponential backoff and jitter, honouring a server's ``Retry-After``;
other errors (bad request, authentication, unknown model) fail at once. The key comes from
``agentrl.credentials.litellm_key``: never ``$OPENAI_API_KEY`` to a server other than OpenAI's own.

A refused connection (nothing listening) or an unknown host is retried twice within a second, then
fails in one line naming the URL. The reply's ``response_format`` follows ``agentrl.judge.formats``:
a server that refuses one form gets the next, at once, without spending a retry.
"""

from __future__ import annotations

import asyncio
import email.utils
import errno
import functools
import logging
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl.credentials import litellm_key
from agentrl.errors import ConfigError
from agentrl.judge.config import JudgeConfig
from agentrl.judge.formats import (
    forms_for,
    names_response_format,
    note_accepted,
    note_refused,
    response_format,
    start_form,
    verdict_schema,
)

__all__ = [
    "CallFailed",
    "CallPool",
    "CallResult",
    "Deferred",
    "complete",
    "litellm_providers",
    "load_litellm",
]


@dataclass
class Deferred:
    """A call whose kwargs are made when a worker sends it, and whose failure the worker reports
    before it takes the next call (so the next call already knows what this one learnt)."""

    make: Callable[[], dict[str, Any]]
    failed: Callable[[BaseException], None]


Request = dict[str, Any] | Deferred
_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}
#: Retries of a refused connection or an unknown host, 0.25 s then 0.5 s apart: a server that is
#: restarting gets a moment, a URL with nothing behind it fails in under a second.
_UNREACHABLE_RETRIES = 2


@dataclass
class CallResult:
    """The reply text of one successful call and what it cost."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    attempts: int = 1


class CallFailed(Exception):
    """A call failed for good (after its retries, or at once for a non-retryable error)."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


_LITELLM: Any = None


def load_litellm() -> Any:
    """Import litellm quietly: local price map, no telemetry, no debug banners, errors only."""
    global _LITELLM
    if _LITELLM is not None:
        return _LITELLM
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    litellm.turn_off_message_logging = True
    litellm.set_verbose = False
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
        logging.getLogger(name).setLevel(logging.ERROR)
    _LITELLM = litellm
    return litellm


@functools.cache
def litellm_providers() -> frozenset[str]:
    """The provider prefixes litellm routes by (``openai``, ``ollama``, ``hosted_vllm``, ...)."""
    litellm = load_litellm()
    names = {str(getattr(p, "value", p)) for p in litellm.provider_list}
    try:
        from litellm.llms.openai_like.json_loader import JSONProviderRegistry

        names.update(JSONProviderRegistry.list_providers())
    except Exception:  # an older or newer litellm without the registry: the enum is enough
        pass
    return frozenset(names)


def _unreachable(e: BaseException) -> str | None:
    """Why the server could not be reached at all (refused, unknown host), or None for other errors."""
    seen: set[int] = set()
    c: BaseException | None = e
    while c is not None and id(c) not in seen:
        seen.add(id(c))
        if isinstance(c, ConnectionRefusedError) or (
            isinstance(c, OSError) and c.errno == errno.ECONNREFUSED
        ):
            return "refused the connection (is a server listening there?)"
        if isinstance(c, socket.gaierror):
            return "cannot be resolved (check the host name)"
        c = c.__cause__ or c.__context__
    return None


def _request_url(e: BaseException) -> str | None:
    """The URL of the failed request, when an exception in the chain carries it."""
    seen: set[int] = set()
    c: BaseException | None = e
    while c is not None and id(c) not in seen:
        seen.add(id(c))
        try:
            url = getattr(getattr(c, "request", None), "url", None)
        except Exception:  # httpx raises when an error has no request
            url = None
        if url:
            return str(url)
        c = c.__cause__ or c.__context__
    return None


def _status(e: BaseException) -> int | None:
    code = getattr(e, "status_code", None)
    return code if isinstance(code, int) else None


def _error_text(e: BaseException) -> str:
    """What an HTTP error says: its message, and the server's body where the SDK kept it apart
    (openai 3 drops a body whose ``error`` is a plain string from the message: ``Error code: 400``)."""
    parts = [str(e)]
    body = getattr(e, "body", None)
    if body is not None:
        parts.append(str(body))
    try:
        text = getattr(getattr(e, "response", None), "text", None)
    except Exception:  # a streamed response that was never read
        text = None
    if isinstance(text, str):
        parts.append(text[:2000])
    return " ".join(parts)


def _retry_after(e: BaseException) -> float | None:
    """Seconds the server asked us to wait (``Retry-After``: seconds or an HTTP date), if any."""
    for headers in (
        getattr(e, "litellm_response_headers", None),
        getattr(getattr(e, "response", None), "headers", None),
    ):
        if not headers:
            continue
        try:
            value = headers.get("retry-after") or headers.get("Retry-After")
        except Exception:
            continue
        if not value:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
                return max(0.0, when.timestamp() - time.time())
            except (TypeError, ValueError):
                continue
    return None


def _retryable(e: BaseException) -> bool:
    if isinstance(e, asyncio.TimeoutError | TimeoutError | ConnectionError):
        return True
    status = _status(e)
    if status is not None:
        return status in _RETRY_STATUS or status >= 500
    name = type(e).__name__
    return name in {"Timeout", "APIConnectionError", "APITimeoutError", "ServiceUnavailableError"}


def _usage(resp: Any, litellm: Any) -> tuple[int, int, float]:
    usage = getattr(resp, "usage", None)
    pt = int(getattr(usage, "prompt_tokens", 0) or 0)
    ct = int(getattr(usage, "completion_tokens", 0) or 0)
    hidden = getattr(resp, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    if cost is None and "response_cost" not in hidden:  # litellm did not even try: ask it once
        try:
            cost = litellm.completion_cost(completion_response=resp)
        except Exception:  # unknown model (a local server): no price
            cost = 0.0
    return pt, ct, float(cost or 0.0)


class CallPool:
    """``size`` worker tasks on one event loop, each making one litellm call at a time.

    Why workers and not a semaphore: when a wave of replies arrives together, a semaphore wakes
    the next caller only after every resumed caller has run, so the next wave leaves in a burst
    and the calls stay in lockstep. A worker sends its next request as soon as it has handled a
    reply, which keeps the calls staggered and the server busy (see tests/bench/judge_throughput).
    """

    def __init__(self, size: int) -> None:
        self._queue: asyncio.Queue[tuple[Request, float, asyncio.Future[Any]]] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self._workers = [loop.create_task(self._work()) for _ in range(size)]

    async def _work(self) -> None:
        litellm = load_litellm()
        while True:
            request, timeout_s, fut = await self._queue.get()
            if fut.done():  # the caller gave up (cancelled) while the request waited
                continue
            try:
                kwargs = request.make() if isinstance(request, Deferred) else request
                async with asyncio.timeout(timeout_s):  # no extra task, unlike wait_for
                    resp = await litellm.acompletion(**kwargs)
            except asyncio.CancelledError:
                if not fut.done():
                    fut.cancel()
                raise
            except Exception as e:
                if isinstance(request, Deferred):
                    request.failed(e)
                if not fut.done():
                    fut.set_exception(e)
            else:
                if not fut.done():
                    fut.set_result(resp)

    async def call(self, request: Request, timeout_s: float) -> Any:
        """Queue one ``litellm.acompletion(**kwargs)`` and wait for its response (or exception).

        ``request`` is the kwargs, or a ``Deferred`` call (made when a worker sends it)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((request, timeout_s, fut))
        return await fut

    def close(self) -> None:
        """Cancel the workers (calls in flight are abandoned)."""
        for w in self._workers:
            w.cancel()


async def complete(
    config: JudgeConfig, messages: list[dict[str, str]], pool: CallPool, ids: list[str]
) -> CallResult:
    """One chat completion about criteria ``ids`` with retries. Raises ``CallFailed`` when it cannot get a reply.

    The ``response_format`` asks for ``verdict_schema(ids)`` in the first form the server takes
    (``config.response_format``; ``agentrl.judge.formats``). The pool bounds the calls in flight;
    a call that backs off waits outside it.
    """
    litellm = load_litellm()
    model = config.litellm_model(litellm_providers())
    if not config.api_base and not config.extra_kwargs.get("api_base"):
        try:
            litellm.get_llm_provider(model=model)
        except Exception:
            raise ConfigError(
                f"judge model {model!r}: litellm knows no provider for it; for a local OpenAI-compatible "
                "server give --api-base URL (judge.api_base), else prefix a provider (openai/..., anthropic/...)"
            ) from None
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "temperature": config.temperature,
        "timeout": config.timeout_s,
        "max_retries": 0,
        "num_retries": 0,
        "drop_params": True,
    }
    if config.api_base:
        kwargs["api_base"] = config.api_base
    # Explicit prices (or 0 for a local server) spare litellm a failing price-map lookup per call.
    if config.input_cost_per_token is not None or config.output_cost_per_token is not None or config.api_base:
        kwargs["input_cost_per_token"] = config.input_cost_per_token or 0.0
        kwargs["output_cost_per_token"] = config.output_cost_per_token or 0.0
    if config.max_tokens:
        kwargs["max_tokens"] = config.max_tokens
    kwargs.update(config.extra_kwargs)
    # $OPENAI_API_KEY only to OpenAI's own API; any other server gets its own key or a placeholder.
    base = kwargs.get("api_base") or kwargs.get("base_url")
    given = config.api_key or kwargs.get("api_key")
    key = litellm_key(litellm, kwargs["model"], base, str(given) if given else None)
    if key:
        kwargs["api_key"] = key
    # A response_format given in extra_kwargs is sent as it is, with no fallback.
    mode = "given" if "response_format" in config.extra_kwargs else config.response_format
    forms = ("given",) if mode == "given" else forms_for(mode)
    schema = verdict_schema(ids)
    form = 0
    attempt = retries = 0

    def make() -> dict[str, Any]:
        # Made when a worker sends it: by then earlier calls may have found the form the server takes.
        nonlocal form
        call = dict(kwargs)
        if mode != "given":
            form = max(form, start_form(mode, base, model))
            rf = response_format(forms[form], schema)
            if rf is not None:
                call["response_format"] = rf
        return call

    def failed(e: BaseException) -> None:
        if mode != "given" and forms[form] != "none" and names_response_format(_status(e), _error_text(e)):
            note_refused(mode, base, model, form)

    request = Deferred(make, failed)
    while True:
        attempt += 1
        try:
            resp = await pool.call(request, config.timeout_s + 5)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            status, text = _status(e), _error_text(e)
            detail = f"{type(e).__name__}" + (f" {status}" if status else "") + f": {text[:300]}"
            if mode != "given" and forms[form] != "none" and names_response_format(status, text):
                if form + 1 < len(forms):  # the worker noted the refusal (``failed``)
                    form += 1
                    continue
                raise CallFailed(
                    f"judge call failed: the server refused response_format {forms[form]} ({detail}); "
                    "--response-format auto tries the forms it may take",
                    attempt,
                ) from e
            down = _unreachable(e)
            if down is not None:
                if retries >= min(_UNREACHABLE_RETRIES, config.max_retries):
                    where = base or _request_url(e) or "the provider's API"
                    raise CallFailed(
                        f"cannot connect to the judge server {where}: it {down}; {attempt} attempt(s)",
                        attempt,
                    ) from None
                retries += 1
                await asyncio.sleep(0.25 * 2 ** (retries - 1))
                continue
            if not _retryable(e) or retries >= config.max_retries:
                raise CallFailed(f"judge call failed after {attempt} attempt(s): {detail}", attempt) from e
            retries += 1
            delay = min(config.backoff_max_s, config.backoff_base_s * 2 ** (retries - 1))
            delay *= random.uniform(0.5, 1.0)
            after = _retry_after(e)
            if after is not None:
                delay = max(delay, min(after, config.backoff_max_s))
            await asyncio.sleep(delay)
            continue
        if mode != "given":
            note_accepted(mode, base, model, form)
        pt, ct, cost = _usage(resp, litellm)
        try:
            text = resp.choices[0].message.content
        except (AttributeError, IndexError):
            text = None
        return CallResult(
            text=text or "", prompt_tokens=pt, completion_tokens=ct, cost_usd=cost, attempts=attempt
        )
