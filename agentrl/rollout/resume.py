"""Resuming a rollout only with the parameters its output was written with.

A rollout resumes by skipping the episodes already in its output file, which is only right when
the rest are sampled the same way. So the parameters that decide what an episode samples or how
it is scored (policy, noise, sampling settings, seed, suite, env settings, judge model) are kept
beside the output in ``OUT.params.json``, written atomically before the first trajectory line;
a later run into the same file with other parameters is refused, naming the difference. An
output written before agentrl kept this file resumes as before, unchecked. Parameters that only
choose which episodes run (``-n``, ``--limit``, ``--task``) or how (concurrency, timeouts,
retries, server address, caches) may change between runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.atomic import write_atomic
from agentrl.errors import ConfigError
from agentrl.outputs import is_regular_file, naming

__all__ = ["PARAMS_FORMAT", "check_resume", "env_params", "params_path", "record_params"]

PARAMS_FORMAT = "agentrl.rollout.params/1"

# Env settings that change how an episode runs operationally, not what it samples or scores.
_OPERATIONAL = {
    "suite",  # recorded as --suite, resolved
    "cache.mode",
    "cache.path",
    "search.timeout_s",
    "search.retries",
    "fetch.timeout_s",
    "fetch.retries",
    "fetch.user_agent",
    "fetch.max_redirects",
    "fetch.allow_private",  # the SSRF guard's settings: what may be reached, not what is sampled
    "fetch.allow_addresses",
    "search.allow_private",
    "budgets.tool_timeout_s",
    "judge_api_base",
}


def params_path(out: str | os.PathLike[str]) -> Path:
    """``OUT.params.json``: where the parameters of the rollout output ``out`` are kept."""
    out = Path(out)
    return out.with_name(out.name + ".params.json")


def _flatten(prefix: str, value: Any, into: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, into)
    else:
        into[prefix] = value


def env_params(env_config: Mapping[str, Any]) -> dict[str, Any]:
    """The env settings (an ``EnvConfig`` dumped as JSON) that a resumed rollout must keep, flattened
    to ``env.budgets.max_turns``-style keys."""
    flat: dict[str, Any] = {}
    _flatten("", env_config, flat)
    if flat.get("split") == "train":  # the default: outputs written before suites had splits resume
        del flat["split"]
    return {f"env.{k}": v for k, v in sorted(flat.items()) if k not in _OPERATIONAL}


def _show(params: Mapping[str, Any], keys: list[str]) -> str:
    parts = []
    for k in keys:
        v = params.get(k, "(not set)")
        shown = v if isinstance(v, str) else json.dumps(v)
        parts.append(f"{k} {shown}" if k.startswith("--") else f"{k}={shown}")
    return " ".join(parts)


def _stored(out: Path) -> dict[str, Any] | None:
    side = params_path(out)
    if not side.exists():
        return None
    if not is_regular_file(side):
        raise ConfigError(f"{side}: not a regular file")
    with naming(side):
        text = side.read_bytes()[: 1 << 20]  # parameters are a few hundred bytes; never read a huge file
    try:
        data = json.loads(text)
        params = data["params"]
        if data.get("format") != PARAMS_FORMAT or not isinstance(params, dict):
            raise ValueError("unknown format")
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(
            f"{side}: not a rollout parameter file ({e}); remove it to resume {out} without the check"
        ) from None
    return params


def _has_trajectories(out: Path) -> bool:
    return is_regular_file(out) and out.stat().st_size > 0


def check_resume(out: str | os.PathLike[str], params: Mapping[str, Any]) -> None:
    """Refuse to resume ``out`` when it holds trajectories written with other ``params``; the
    ``ConfigError`` names both sets of differing values. Reads only ``OUT.params.json``."""
    out = Path(out)
    if not _has_trajectories(out):
        return
    old = _stored(out)
    if old is None:
        return  # written before parameters were kept: resumes as before
    new = json.loads(json.dumps(dict(params)))  # compare as stored (tuples → lists, keys → str)
    keys = list(new) + [k for k in old if k not in new]  # in the order the caller gave them
    diff = [k for k in keys if old.get(k, "(not set)") != new.get(k, "(not set)")]
    if diff:
        raise ConfigError(
            f"{out} was written with {_show(old, diff)}; this run has {_show(new, diff)}; "
            "use another --out or the same parameters"
        )


def record_params(out: str | os.PathLike[str], params: Mapping[str, Any]) -> None:
    """Write ``OUT.params.json`` (temporary file, fsync, rename) unless ``out`` already holds
    trajectories, in which case ``check_resume`` has decided and the file stays as it is."""
    out = Path(out)
    if _has_trajectories(out):
        return
    side = params_path(out)
    body = json.dumps({"format": PARAMS_FORMAT, "params": dict(params)}, indent=1, sort_keys=True)
    with naming(side):  # a full disk names the file, not an unnamed errno
        write_atomic(side, (body + "\n").encode("utf-8"))
