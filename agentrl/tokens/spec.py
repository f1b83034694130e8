"""How a run samples a turn, decided once: ``SamplingSpec`` and its one builder, ``sampling_spec``.

A spec holds what every path that samples or reads sampled tokens must agree on: the ids that end a
turn (``turn_stop_ids``: the template's end-of-turn ∪ the model's EOS ids), the limits (``max_len``
of a whole conversation, ``max_new_tokens`` of one turn), ``temperature`` and ``top_p``. The same
spec builds the ``Expander`` (``spec.expander(tokenizer)``), so the stop ids a sampler stops on are
the ones the expander treats as a turn's end, in the trainer, replay, explain, the report and the
engine adapters alike.

The trainer records its spec in the run directory (``sampling.json``, ``RunDir.sampling_file``);
replay, explain and the report read it back with ``read_sampling_spec``, so their rows are the
trainer's even for a model whose EOS is not its template's end of turn.

Where no generation config is given, ``sampling_spec`` reads ``generation_config.json`` beside the
tokenizer when the tokenizer was loaded from a local directory (a model directory; a tokenizer
loaded by hub id has none to read, so pass its ``GenerationConfig``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError, TemplateError
from agentrl.tokens.expander import Expander
from agentrl.tokens.stops import turn_stop_ids

__all__ = [
    "GENERATION_CONFIG",
    "SamplingSpec",
    "read_sampling_spec",
    "sampling_spec",
    "saved_generation_config",
]

GENERATION_CONFIG = "generation_config.json"


@dataclass(frozen=True)
class SamplingSpec:
    """The stop ids, limits and sampling parameters of a run (see the module docstring)."""

    stop_ids: frozenset[int]
    max_len: int | None = None
    max_new_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0

    def expander(self, tokenizer: Any, **kwargs: Any) -> Expander:
        """The ``Expander`` of this spec: rows cut at ``max_len`` (unless ``kwargs`` give another),
        turns ended by ``stop_ids`` (``kwargs`` go to ``Expander``: a chat template, template
        options, ``check``)."""
        max_len = kwargs.pop("max_len", self.max_len)
        return Expander(tokenizer, max_len=max_len, stop_token_ids=self.stop_ids, **kwargs)

    def with_max_len(self, max_len: int | None) -> SamplingSpec:
        """This spec with another ``max_len`` (None keeps it)."""
        return self if max_len is None else replace(self, max_len=max_len)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["stop_ids"] = sorted(self.stop_ids)
        return data

    @classmethod
    def from_json(cls, data: Any, source: str = "sampling spec") -> SamplingSpec:
        if not isinstance(data, dict) or not isinstance(data.get("stop_ids"), list):
            raise ConfigError(f"{source}: not a sampling spec (a mapping with a stop_ids list)")
        known = {k: data[k] for k in ("max_len", "max_new_tokens", "temperature", "top_p") if k in data}
        try:
            return cls(frozenset(int(i) for i in data["stop_ids"]), **known)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{source}: {e}") from None


def saved_generation_config(tokenizer: Any) -> dict[str, Any] | None:
    """``generation_config.json`` of the local directory ``tokenizer`` was loaded from, or None."""
    where = getattr(tokenizer, "name_or_path", None)
    if not where:
        return None
    path = Path(str(where)) / GENERATION_CONFIG
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class _Eos:
    """A generation config read from JSON: only its ``eos_token_id`` matters here."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.eos_token_id = data.get("eos_token_id")


def sampling_spec(
    tokenizer: Any,
    *,
    generation_config: Any = None,
    max_len: int | None = None,
    max_new_tokens: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    chat_template: str | None = None,
    **template_kwargs: Any,
) -> SamplingSpec:
    """The spec of sampling ``tokenizer``'s model: its stop ids from the chat template and
    ``generation_config`` (a transformers ``GenerationConfig``; default: the one saved beside the
    tokenizer, if any), with the given limits and sampling parameters. ``TemplateError`` when no id
    could ever end a turn."""
    if generation_config is None:
        saved = saved_generation_config(tokenizer)
        generation_config = _Eos(saved) if saved is not None else None
    stops = turn_stop_ids(
        tokenizer, chat_template=chat_template, generation_config=generation_config, **template_kwargs
    )
    return SamplingSpec(stops, max_len, max_new_tokens, float(temperature), float(top_p))


def read_sampling_spec(path: Path) -> SamplingSpec | None:
    """The spec a run recorded at ``path`` (``RunDir.sampling_file``); None when it recorded none
    (a run made before runs recorded it). ``ConfigError`` on a file that is not a spec."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{path}: not JSON ({e})") from None
    return SamplingSpec.from_json(data, str(path))


def run_expander(tokenizer: Any, sampling_file: Path | None, max_len: int | None = None) -> Expander:
    """The expander a run trained with, for replay, explain and the report: the spec the run
    recorded at ``sampling_file`` (``RunDir.sampling_file``), or for a run that recorded none (or
    no run) the spec of ``tokenizer`` alone; ``max_len`` (when given) replaces the spec's."""
    spec = read_sampling_spec(sampling_file) if sampling_file is not None else None
    if spec is None:
        try:
            spec = sampling_spec(tokenizer)
        except TemplateError:  # no stop id at all: the expander reads turns without one
            spec = SamplingSpec(frozenset())
    return spec.with_max_len(max_len).expander(tokenizer)
