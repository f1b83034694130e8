"""Activation memory of a training step, and gradient checkpointing chosen by it.

A forward pass with gradients keeps, for backward, tensors that grow with the tokens of the micro-batch
and with the number of trained layers (frozen layers below the lowest trained one keep nothing). On a
135M model those dominate a step's memory: SmolLM2-135M keeps ~47 KB a token in each trained layer,
2 GB for a 1,536-token micro-batch through all 30 layers, against 2.2 GB for the model, its gradients
and AdamW's moments. Gradient checkpointing keeps only each layer's input and recomputes the rest in
backward (the same values on a CPU: the recomputation runs the same kernels), at the price of a second
forward pass through the trained layers.

``activation_bytes`` measures what a model keeps, with two short probe passes (no backward), for any
architecture and attention kernel: the bytes of every distinct storage autograd saves, parameters
excluded, at two lengths, fitted as ``a·T + c·T²`` (the quadratic term is an attention kernel that
keeps its scores, such as eager attention, or the mask of packed rows). ``model.gradient_checkpointing:
auto`` turns checkpointing on when one micro-batch would keep more than ``model.activation_memory_mb``
(1,024 MB on a CPU, a quarter of a GPU's memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from agentrl.errors import ConfigError

__all__ = [
    "PROBE_TOKENS",
    "ActivationCost",
    "activation_bytes",
    "checkpointing_choice",
    "default_budget_mb",
    "enable_checkpointing",
]

PROBE_TOKENS = (32, 64)
"""The two lengths the probe passes run at (the fit of ``a·T + c·T²`` needs two)."""


@dataclass(frozen=True)
class ActivationCost:
    """Bytes a forward pass keeps for backward: ``per_token · T + per_token_pair · T²`` for one line of
    T tokens (the quadratic term: an attention kernel that keeps [T, T] scores, or the [T, T] mask of
    packed rows that the attention keeps for backward)."""

    per_token: float
    per_token_pair: float

    def at(self, tokens: int, line: int | None = None) -> float:
        """What a micro-batch of ``tokens`` tokens keeps, in lines of at most ``line`` tokens (packed
        rows, or padded rows, are at most ``rollout.max_len`` long): the quadratic term is per line."""
        line = tokens if line is None else min(line, tokens)
        return self.per_token * tokens + self.per_token_pair * tokens * line


def _saved_bytes(model: nn.Module, tokens: int, packed: bool) -> int:
    """Bytes of the distinct non-parameter storages autograd saves in one forward pass of ``tokens``
    tokens through ``model``'s backbone, in training mode, under the trainer's autocast, with the
    block-causal mask of packed rows when ``packed`` (as ``forward_logprobs(pack=True)`` passes it).
    The LM head is left out: the trainer runs it on the policy's tokens in chunks (but a copy head,
    which the trainer runs whole, is in)."""
    from agentrl.learn.forward import _Packing
    from agentrl.learn.models import copy_head_of, forward_context

    whole = copy_head_of(model) or not hasattr(model, "get_decoder")
    backbone = model if whole else model.get_decoder()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t

    device = next(model.parameters()).device
    ids = torch.zeros(1, tokens, dtype=torch.long, device=device)
    inputs: dict[str, Any] = {"input_ids": ids}
    if packed:
        inputs = _Packing({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, model).inputs
    was_training = model.training
    # The probe draws nothing from the run's random streams (a dropout layer would).
    forked = [device] if device.type == "cuda" else []
    try:
        model.train()
        with (
            torch.random.fork_rng(devices=forked),
            torch.enable_grad(),
            forward_context(model),
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
        ):
            out = backbone(**inputs, use_cache=False)
            del out
    finally:
        model.train(was_training)
    return sum(seen.values())


def activation_bytes(model: nn.Module, packed: bool = False) -> ActivationCost:
    """What ``model`` keeps for backward per token (and per pair of tokens in a line), measured by two
    probe passes of ``PROBE_TOKENS`` tokens (``packed``: with packed rows' mask). Run it before
    checkpointing is enabled (it measures what is kept now), with the parameters that will train
    already marked ``requires_grad``."""
    (t1, t2) = PROBE_TOKENS
    b1, b2 = _saved_bytes(model, t1, packed), _saved_bytes(model, t2, packed)
    # b = a·t + c·t²  →  c = (b2/t2 − b1/t1) / (t2 − t1), a = b2/t2 − c·t2
    c = max((b2 / t2 - b1 / t1) / (t2 - t1), 0.0)
    # Below ~1% of the linear term the difference is the probe's fixed allocations, not attention.
    if c * t2 < 0.01 * (b2 / t2):
        c = 0.0
    return ActivationCost(per_token=max(b2 / t2 - c * t2, 0.0), per_token_pair=c)


def default_budget_mb(device: torch.device) -> float:
    """``model.activation_memory_mb`` when the config leaves it null: 1,024 MB on a CPU (a 135M model
    then trains in 4 GB), a quarter of the device's memory on a GPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / 4 / 2**20
    return 1024.0


Setting = bool | Literal["auto"]


def checkpointing_choice(
    model: nn.Module,
    setting: Setting,
    micro_tokens: int,
    budget_mb: float | None,
    line: int | None = None,
    packed: bool = False,
) -> tuple[bool, str]:
    """Whether to checkpoint, and one line for the run's log saying why. ``micro_tokens``: the most
    tokens one forward/backward pass holds (the micro-batch's budget, or a row longer than it), in
    lines of at most ``line`` tokens (``packed``: rows packed into lines, as the update runs them).
    ``budget_mb`` None: ``default_budget_mb``. A model that cannot checkpoint is a ``ConfigError``
    with ``true``, and stays off with ``auto``, as does a model the probe cannot run."""
    if setting is not True and setting is not False and setting != "auto":
        raise ValueError(f"gradient_checkpointing: true, false or auto, not {setting!r}")
    supported = bool(getattr(model, "supports_gradient_checkpointing", False))
    if setting is True and not supported:
        raise ConfigError(
            f"model.gradient_checkpointing: true, but {type(model).__name__} does not support it; "
            "set it to false or auto"
        )
    if setting != "auto":
        why = f"gradient checkpointing: {'on' if setting else 'off'} (model.gradient_checkpointing)"
        return bool(setting), why
    if not supported:
        return False, f"gradient checkpointing: off (auto: {type(model).__name__} does not support it)"
    if not any(p.requires_grad for p in model.parameters()):
        return False, "gradient checkpointing: off (auto: nothing trains)"
    try:
        cost = activation_bytes(model, packed=packed)
    except Exception as e:  # a model whose backbone the probe cannot call: measure nothing, change nothing
        return False, f"gradient checkpointing: off (auto: the probe pass failed: {type(e).__name__}: {e})"
    budget = default_budget_mb(next(model.parameters()).device) if budget_mb is None else budget_mb
    need = cost.at(micro_tokens, line) / 2**20
    on = need > budget
    return on, (
        f"gradient checkpointing: {'on' if on else 'off'} (auto: a micro-batch of {micro_tokens} tokens keeps "
        f"~{need:,.0f} MB of activations, {'over' if on else 'within'} model.activation_memory_mb = {budget:,.0f})"
    )


def enable_checkpointing(model: nn.Module) -> None:
    """Recompute each decoder layer's activations in backward (transformers' checkpointing, the
    non-reentrant kind). The reentrant kind needs the layers' inputs to require grad, which
    transformers arranges with a hook on the input embeddings; with frozen embeddings and frozen lower
    layers (``model.trainable_layers``) that hook puts every frozen layer into the backward pass. The
    non-reentrant kind needs no such hook, so it is removed: backward stops at the lowest trained layer."""
    kw = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers ≥ 5.2x
    if enable is not None:
        enable(activation_checkpointing_kwargs=kw)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
    hooks = [getattr(model, a, None) for a in ("_require_grads_hook", "_require_grads_hooks")]
    if any(h for h in hooks):
        model.disable_input_require_grads()
