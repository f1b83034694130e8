"""A critic rebuilt from a trainer checkpoint, to give stored trajectories their values V(s_t)
(``agentrl replay`` / ``agentrl explain --critic``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError
from agentrl.rundir import SHARDED, checkpoint_state_file

__all__ = ["load_critic"]


def _gather_shards(directory: Path) -> dict[str, Any]:
    """An FSDP run's sharded checkpoint (``torch.distributed.checkpoint``) as one plain state dict,
    read in this single process."""
    import tempfile

    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    if not directory.is_dir():
        raise ConfigError(f"--critic: a sharded (FSDP) checkpoint without its shards ({directory})")
    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(directory, Path(tmp) / "full.pt")
        return torch.load(Path(tmp) / "full.pt", map_location="cpu", weights_only=False)


def load_critic(path: str | Path) -> Any:
    """The ``ValueModel`` of a PPO checkpoint (written by ``agentrl train``), in eval mode on the CPU.

    The architecture is rebuilt from the checkpoint's ``config.model`` (a ``tiny:`` spec, or a local
    model directory read with ``local_files_only``) and the vocabulary size from its weights; then
    the ``critic`` state dict is loaded strictly (an FSDP run's shards are gathered first). Raises ``ConfigError`` for a checkpoint without a
    critic (a GRPO run) or a model that cannot be rebuilt offline.
    """
    import torch

    from agentrl.learn.models import ValueModel
    from agentrl.learn.policy_model import load_checkpoint_state, rebuild_model

    file = checkpoint_state_file(path)
    if file is None:
        raise ConfigError(f"--critic {path}: no checkpoint (state.pt) there")
    state = load_checkpoint_state(file, "--critic ")
    if isinstance(state, dict) and state.get("sharded"):
        state = {**state, **_gather_shards(file.parent / SHARDED)}
    if not isinstance(state, dict) or "critic" not in state:
        raise ConfigError(f"--critic {file}: the checkpoint has no critic (was the run PPO?)")
    sd: dict[str, torch.Tensor] = state["critic"]
    model_cfg = (state.get("config") or {}).get("model") or {}
    shared = model_cfg.get("critic_backbone") == "shared"
    if int(model_cfg.get("lora_rank") or 0) > 0 and shared:
        raise ConfigError(f"--critic {file}: a critic shared with a LoRA policy cannot be rebuilt")
    critic = ValueModel.from_policy(rebuild_model(model_cfg, sd, f"--critic {file}: "), shared=shared)
    try:
        critic.load_state_dict(sd)
    except RuntimeError as e:
        raise ConfigError(f"--critic {file}: weights do not fit the rebuilt critic: {str(e)[:300]}") from None
    return critic.eval()
