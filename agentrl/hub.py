"""Hugging Face hub ids named as inputs (``model.path: Qwen/Qwen3-0.6B``): found, or refused at once.

transformers fetches a hub id it does not have with retries and backoff, so with no network a run
failed only after most of a minute. ``check_hub_id`` decides before anything is built: an id in
the local hub cache passes without a request; otherwise, with ``HF_HUB_OFFLINE`` set it is refused
at once, and else one request to the hub's API (``HF_ENDPOINT``, default https://huggingface.co)
with a short timeout and no retry says whether the repository exists. Each failure is one
``ConfigError`` naming the field, the id and what to do. The environment is read at call time
(not huggingface_hub's import-time constants); only the standard library is imported at module
level, httpx only when a request is made.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentrl.errors import ConfigError

__all__ = ["HUB_TIMEOUT_S", "check_hub_id", "hub_cache_dir", "in_hub_cache"]

#: Seconds one probe of the hub may take (connect and read), with no retry.
HUB_TIMEOUT_S = 5.0
_TRUE = {"1", "on", "yes", "true"}


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps downloaded repositories: ``HF_HUB_CACHE``, else ``HF_HOME/hub``,
    else ``~/.cache/huggingface/hub`` (``XDG_CACHE_HOME`` respected)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(xdg) / "huggingface" / "hub"


def in_hub_cache(repo_id: str, filename: str = "config.json") -> bool:
    """Whether a snapshot of model ``repo_id`` in the hub cache holds ``filename``."""
    snapshots = hub_cache_dir() / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any((s / filename).is_file() for s in snapshots.iterdir())


def _offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def check_hub_id(
    field: str, repo_id: str, *, filename: str = "config.json", timeout: float = HUB_TIMEOUT_S
) -> None:
    """Refuse ``repo_id`` (the value of ``field``) unless it is in the hub cache or the hub answers
    that it exists, within ``timeout`` seconds (module docstring). A 401/403 (a gated or private
    repository) passes: transformers may hold a token for it."""
    if in_hub_cache(repo_id, filename):
        return
    fix = f"download it first (huggingface-cli download {repo_id}) or give a local directory"
    if _offline():
        raise ConfigError(
            f"{field} {repo_id!r}: a hub id that is not in the Hugging Face cache ({hub_cache_dir()}) and "
            f"HF_HUB_OFFLINE is set: {fix}"
        )
    import httpx

    endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    url = f"{endpoint}/api/models/{repo_id}"
    try:
        r = httpx.get(url, timeout=timeout, follow_redirects=True)
    except httpx.HTTPError as e:
        why = type(e).__name__ if not str(e) else f"{type(e).__name__}: {str(e).splitlines()[0]}"
        raise ConfigError(
            f"{field} {repo_id!r}: not in the Hugging Face cache, and the hub ({endpoint}) cannot be "
            f"reached ({why}); {fix}, or set HF_ENDPOINT to a mirror"
        ) from None
    if r.status_code == 404:
        raise ConfigError(f"{field} {repo_id!r}: no such model on the hub ({endpoint}); check the id")
    if r.status_code >= 500:
        raise ConfigError(
            f"{field} {repo_id!r}: not in the Hugging Face cache, and the hub ({endpoint}) answered "
            f"HTTP {r.status_code}; {fix}"
        )
