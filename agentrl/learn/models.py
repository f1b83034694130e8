"""Policy, reference and critic models on transformers.

``tiny:`` specs build a small random causal LM from a config (tests and the CPU quickstart, no
download). The critic is the policy's architecture with a scalar value head, on a separate copy of
the backbone or on the policy's own hidden states.

Shift convention (docs/tokens.md, "The row" and ``token_logprobs``): the model output at position
t − 1 has seen tokens < t, so it gives log p(token t) and the critic's V(s_t) — the value *before*
token t. Position 0 has no prediction and gets 0.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from agentrl.errors import ConfigError

__all__ = [
    "GPU_ATTENTION",
    "ValueModel",
    "build_tiny_model",
    "copy_head_of",
    "forward_context",
    "frozen_copy",
    "fsdp_modules",
    "full_params",
    "is_sharded",
    "parse_tiny_spec",
    "register_model_types",
    "shifted",
]

_TINY_KEYS = {
    "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "intermediate": 0, "max_positions": 4096, "copy": 0,
}  # fmt: skip


def parse_tiny_spec(spec: str) -> dict[str, int]:
    """``'tiny:'`` or ``'tiny:layers=2,hidden=64'`` → the architecture sizes (unknown keys are errors)."""
    body = spec.removeprefix("tiny:")
    sizes = dict(_TINY_KEYS)
    for part in filter(None, (p.strip() for p in body.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in _TINY_KEYS or not value.isdigit():
            raise ConfigError(
                f"model.path {spec!r}: expected 'tiny:' followed by key=int pairs among {', '.join(_TINY_KEYS)}"
            )
        sizes[key] = int(value)
    sizes["intermediate"] = sizes["intermediate"] or 2 * sizes["hidden"]
    return sizes


def build_tiny_model(vocab_size: int, spec: str = "tiny:", seed: int = 0) -> nn.Module:
    """A randomly initialised Qwen2-architecture causal LM with the sizes of ``spec``; ``copy=d`` (d > 0)
    adds a copy head with d-wide queries and keys (``agentrl.learn.copy_lm``)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from agentrl.learn.copy_lm import CopyConfig

    s = parse_tiny_spec(spec)
    extra = {"copy_dim": s["copy"]} if s["copy"] else {}
    cfg = (CopyConfig if s["copy"] else Qwen2Config)(
        **extra,
        vocab_size=vocab_size,
        hidden_size=s["hidden"],
        intermediate_size=s["intermediate"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"],
        max_position_embeddings=s["max_positions"],
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(cfg)


def register_model_types() -> None:
    """Make transformers' Auto classes know agentrl's own model types (the copy head's
    ``agentrl_copy``), so a saved run or checkpoint loads through ``AutoModelForCausalLM``."""
    import agentrl.learn.copy_lm  # noqa: F401  (registers on import)


def copy_head_of(model: nn.Module) -> bool:
    """Whether ``model`` (or the causal LM inside a peft or DDP wrapper) has a head that is not a
    linear map of its last hidden state (``agentrl.learn.copy_lm``), so its log-probabilities come
    from its whole forward pass."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else getattr(model, "module", model)
    return bool(getattr(inner, "agentrl_whole_forward", False))


def fsdp_modules(module: nn.Module) -> list[Any]:
    """``module``'s submodules (itself included) that FSDP2 manages."""
    from torch.distributed.fsdp import FSDPModule

    return [m for m in module.modules() if isinstance(m, FSDPModule)]


def is_sharded(module: nn.Module) -> bool:
    """Whether ``module`` (or a submodule) is managed by FSDP2."""
    return bool(fsdp_modules(module))


@contextlib.contextmanager
def full_params(module: nn.Module | None) -> Iterator[None]:
    """Gather ``module``'s sharded parameters once (a collective on every rank), so that the forward
    passes inside make no collective calls; reshard on exit. A no-op for unsharded modules."""
    mods = fsdp_modules(module) if module is not None else []
    if not mods:
        yield
        return
    for m in mods:
        m.unshard()
    for m in mods:
        m.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for m in mods[1:] if mods[0] is module else mods:  # the root keeps FSDP's own setting
            m.set_reshard_after_forward(True, recurse=False)
        for m in mods:
            m.reshard()


#: SDPA's backends on a GPU: every one but cuDNN's attention, which builds a graph for each new
#: sequence length (the cache of a decode step grows by one token a step, and a packed micro-batch's
#: length is its own). On an H200 with torch 2.11 a quickstart rollout spent 59 of its 68 s in
#: ``scaled_dot_product_attention``, 17 ms a call, where the same decode step with shapes seen before
#: took 4.6 ms whole (BENCHMARKS.md, "GPU"). Math stays last, so a call no fused kernel takes still runs.
GPU_ATTENTION = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


@contextlib.contextmanager
def forward_context(model: nn.Module) -> Iterator[None]:
    """How a forward pass of ``model`` runs on its device: on a GPU, bf16 autocast for float32
    parameters (fp32 master weights, bf16 matmuls) and SDPA restricted to ``GPU_ATTENTION``; on a
    CPU nothing changes (nor for parameters already in half precision, but the attention kernels).
    The backends are process-wide flags (``torch.nn.attention.sdpa_kernel``), put back on exit."""
    p = next(model.parameters())
    if not p.is_cuda:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with contextlib.ExitStack() as stack:
        if p.dtype == torch.float32:
            stack.enter_context(torch.autocast(device_type="cuda", dtype=torch.bfloat16))
        stack.enter_context(sdpa_kernel([getattr(SDPBackend, name) for name in GPU_ATTENTION]))
        yield


def frozen_copy(model: nn.Module) -> nn.Module:
    """A deep copy with gradients off and in eval mode (the reference policy)."""
    ref = copy.deepcopy(model)
    ref.requires_grad_(False)
    return ref.eval()


def train_last_layers(model: nn.Module, n: int) -> int:
    """Freeze all of a causal LM but its last ``n`` decoder layers and the final norm: the embeddings,
    the layers below and the LM head (tied to the embeddings in most small models) get no gradient,
    so backward stops at the lowest trained layer and the optimiser keeps state for those layers
    only. Returns the number of trainable parameters. ``n`` ≥ the layer count trains every layer
    but still freezes the embeddings and the head (a copy head's own parameters train)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ConfigError(
            f"model.trainable_layers: cannot find the decoder layers of {type(model).__name__} "
            "(expected model.get_decoder().layers)"
        )
    model.requires_grad_(False)
    if copy_head_of(model):  # a copy head is a few thousand parameters that decide what to copy
        for name, p in model.named_parameters():
            if name.startswith("copy_"):
                p.requires_grad_(True)
    kept = list(layers)[-n:] if n > 0 else []
    norm = getattr(decoder, "norm", None)
    for module in [*kept, *([norm] if isinstance(norm, nn.Module) else [])]:
        module.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def shifted(x: torch.Tensor) -> torch.Tensor:
    """[B, T] outputs at positions 0..T−1 → [B, T] predictions for tokens 0..T−1 (0 for token 0)."""
    return torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)


class ValueModel(nn.Module):
    """A transformer backbone with a scalar head: ``values[:, t]`` = V(s_t), shape [B, T].

    ``backbone`` is a base model returning ``last_hidden_state`` (for a separate critic), or a causal
    LM whose last hidden state is read (``shared=True``: the head sits on the policy's detached
    features and only the head is trained by the value loss).
    """

    def __init__(self, backbone: nn.Module, hidden_size: int, shared: bool = False) -> None:
        super().__init__()
        self.backbone = backbone
        self.shared = shared
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)  # start from V = 0: no prior on the reward scale
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_policy(cls, policy: nn.Module, shared: bool = False) -> ValueModel:
        """A critic of the policy's architecture: a copy of its backbone, or (shared) the policy itself."""
        hidden = policy.config.hidden_size
        if shared:
            return cls(policy, hidden, shared=True)
        if hasattr(policy, "get_base_model"):  # peft: the adapted transformers model inside
            policy = policy.get_base_model()
        base = getattr(policy, policy.base_model_prefix, None)
        if base is None:
            raise ConfigError(f"cannot find the backbone of {type(policy).__name__} to build a critic")
        return cls(copy.deepcopy(base), hidden)

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if self.shared:
            # The policy's features, detached: the policy loss alone trains the shared backbone, so
            # the actor and critic optimisers never step the same parameters.
            with torch.no_grad():
                hidden = self.backbone(
                    input_ids=input_ids, output_hidden_states=True, **kwargs
                ).hidden_states[-1]
        else:
            hidden = self.backbone(input_ids=input_ids, **kwargs).last_hidden_state
        return shifted(self.head(hidden.to(self.head.weight.dtype)).squeeze(-1))
