"""FSDP2 (``torch.distributed.fsdp.fully_shard``) for models whose training state does not fit on one
device: parameters, gradients and optimiser state are sharded over the ranks.

Three rules keep it equal to the single-process step (and free of hangs):
- Gradients are *summed* over ranks, not averaged (``shard_model`` sets a divide factor of 1 and
  forces plain SUM reductions, which gloo supports), because our losses are already normalised by
  counts summed over every rank, exactly as in the DDP path.
- Every sharded forward is a collective, so ranks must run the same number of them: the update pads
  a rank's micro-batches with zero-loss dummies (``dummy_micro_batch``).
- Generation and the no-grad forward passes (old/ref log-probabilities, values) run inside
  ``full_params``, which gathers the parameters once; forwards inside it make no collective calls,
  so ranks may generate different numbers of tokens and turns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentrl.learn.models import fsdp_modules, full_params, is_sharded

__all__ = [
    "dummy_micro_batch",
    "full_params",
    "is_sharded",
    "load_sharded",
    "set_grad_divide",
    "shard_model",
    "sharded_state",
]


def _block_types(model: nn.Module) -> set[str]:
    """Class names of the transformer blocks: each block becomes one FSDP unit (one all-gather)."""
    names: set[str] = set()
    for m in model.modules():
        names |= set(getattr(m, "_no_split_modules", None) or [])
    return names


def _check_backend(model: nn.Module) -> None:
    """Refuse parameters off the CPU under gloo: DTensor's gathers (``full_tensor``, which gradient
    clipping calls) end in a SIGSEGV there (torch 2.11, two gloo ranks sharing one H200: the GPU
    kit's ``ranks`` section), although gloo's plain collectives carry CUDA tensors."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_backend() != "gloo":
        return
    devices = sorted({p.device.type for p in model.parameters()} - {"cpu"})
    if devices:
        raise RuntimeError(
            f"FSDP2 over gloo needs the parameters on the CPU, not on {', '.join(devices)}: DTensor's "
            "collectives crash on gloo with device tensors. Use NCCL, one GPU per rank (torchrun "
            "--nproc-per-node = the number of GPUs), or parallelism: ddp."
        )


def shard_model(model: nn.Module, *, mixed_precision: bool = False) -> nn.Module:
    """Apply ``fully_shard`` to every transformer block, then to the root; gradients are summed over
    ranks. With ``mixed_precision`` (GPU) the sharded fp32 master weights compute in bf16."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    _check_backend(model)
    kwargs: dict[str, Any] = {}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    blocks = _block_types(model)
    for m in list(model.modules()):
        if m is not model and type(m).__name__ in blocks:
            fully_shard(m, **kwargs)
    fully_shard(model, **kwargs)
    set_grad_divide(model, 1.0)
    return model


def set_grad_divide(module: nn.Module, factor: float) -> None:
    """Divide the summed gradients by ``factor`` (1.0: a plain sum over ranks; the world size: a mean)."""
    for m in fsdp_modules(module):
        m.set_gradient_divide_factor(float(factor))
        m.set_force_sum_reduction_for_comms(True)


def dummy_micro_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A one-token micro-batch cut from ``batch`` with nothing trainable in it (loss mask 0): its
    forward and backward take part in the collectives of a real micro-batch (all-gathers, gradient
    reduce-scatters) and add exactly zero to every gradient."""
    mb = {k: (v[:1, :1] if v.dim() == 2 else v[:1]) for k, v in batch.items() if not k.startswith("_")}
    mb["loss_mask"] = torch.zeros_like(mb["loss_mask"])
    return mb


def sharded_state(modules: dict[str, tuple[nn.Module, torch.optim.Optimizer | None]]) -> dict[str, Any]:
    """The sharded state dicts of ``{name: (module, optimizer or None)}`` for ``torch.distributed.
    checkpoint``: each rank holds (and saves) only its own shards."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    out: dict[str, Any] = {}
    for name, (module, opt) in modules.items():
        if opt is None:
            out[name] = get_model_state_dict(module)
        else:
            out[name], out[f"{name}_optimizer"] = get_state_dict(module, opt)
    return out


def load_sharded(path: Path, modules: dict[str, tuple[nn.Module, torch.optim.Optimizer | None]]) -> None:
    """Load a checkpoint written from ``sharded_state`` (any rank count with the same model) in place."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    state = sharded_state(modules)
    dcp.load(state, checkpoint_id=str(path))
    for name, (module, opt) in modules.items():
        if opt is None:
            set_model_state_dict(module, state[name])
        else:
            set_state_dict(
                module, opt, model_state_dict=state[name], optim_state_dict=state[f"{name}_optimizer"]
            )
