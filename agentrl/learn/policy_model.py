"""A policy model and its tokenizer loaded from disk, to sample from it (``agentrl rollout --policy hf:PATH``).

``PATH`` is either a transformers directory (``config.json`` and weights, as ``agentrl model
import-gguf`` or ``save_pretrained`` write it; its tokenizer and ``generation_config.json`` beside)
or what ``agentrl train`` writes: a run directory, its ``checkpoints/`` or one ``step_NNNNN``
checkpoint. A checkpoint's policy is rebuilt from its ``config.model`` (a ``tiny:`` spec, or a model
directory read offline) and loads the ``model`` state dict; its tokenizer is the run's ``tokenizer/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError
from agentrl.rundir import (
    SHARDED,
    STATE,
    RunDir,
    checkpoint_damage,
    checkpoint_state_file,
    load_error,
    run_of_checkpoint,
)

__all__ = [
    "LoadedPolicy",
    "checkpoint_run_dir",
    "load_checkpoint_state",
    "load_policy_model",
    "pick_device",
    "rebuild_model",
]


@dataclass
class LoadedPolicy:
    """A causal LM in eval mode, its tokenizer, and where it came from (``source``)."""

    model: Any
    tokenizer: Any
    source: str
    #: For an ``agentrl train`` checkpoint: its run directory (``load_hf_policy`` samples as the run
    #: did: ``agentrl.train.read_run_sampling``) and the config the checkpoint was saved with; None
    #: for a transformers directory.
    run_dir: Path | None = None
    run_config: dict[str, Any] | None = None


def pick_device(device: str = "auto") -> Any:
    """``auto``: CUDA when available, else the CPU; ``cpu`` / ``cuda`` / ``cuda:N`` as given."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"--device {device!r}: expected auto, cpu or cuda[:N]") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: no CUDA device here; use --device cpu")
    return dev


def load_checkpoint_state(file: Path, what: str) -> Any:
    """The object an ``agentrl train`` checkpoint's ``state.pt`` holds, memory-mapped on the CPU;
    ``ConfigError`` ``WHAT FILE: not a torch checkpoint (...)`` for a truncated or foreign file."""
    import torch

    try:
        return torch.load(file, map_location="cpu", weights_only=False, mmap=True)
    except Exception as e:  # a truncated or foreign file (torch's own words may blame mmap)
        raise ConfigError(f"{what}{file}: not a torch checkpoint ({load_error(e)})") from None


def rebuild_model(model_cfg: dict[str, Any], weights: dict[str, Any], what: str) -> Any:
    """The policy architecture a checkpoint's ``config.model`` names, with random weights: a
    ``tiny:`` spec at the vocabulary of the embedding in ``weights``, or a model directory's config
    read offline. ``what`` (``"hf:FILE: "``, ``"--critic FILE: "``) begins every error."""
    from agentrl.learn.bases import resolve_model

    spec = resolve_model(str(model_cfg.get("path", "tiny:")))  # a saved config names a base base:NAME
    if spec.startswith("tiny:"):
        from agentrl.learn.models import build_tiny_model

        embed = next((v for k, v in weights.items() if k.endswith("embed_tokens.weight")), None)
        if embed is None:
            raise ConfigError(f"{what}no embedding in the checkpoint's weights")
        return build_tiny_model(int(embed.shape[0]), spec)
    from transformers import AutoConfig, AutoModelForCausalLM

    from agentrl.learn.models import register_model_types

    register_model_types()
    try:
        config = AutoConfig.from_pretrained(spec, local_files_only=True)
    except OSError as e:
        raise ConfigError(f"{what}cannot read the model config of {spec!r} offline: {e}") from None
    return AutoModelForCausalLM.from_config(config)


def _from_checkpoint(file: Path) -> tuple[Any, Any, dict[str, Any]]:
    from transformers import AutoTokenizer

    from agentrl.learn.models import register_model_types

    state = load_checkpoint_state(file, "hf:")
    if not isinstance(state, dict) or "model" not in state:
        raise ConfigError(f"hf:{file}: not an agentrl checkpoint (no model weights)")
    if state.get("sharded"):
        raise ConfigError(
            f"hf:{file}: a sharded (FSDP) checkpoint; gather it with torch.distributed.checkpoint's "
            f"dcp_to_torch_save first, or point hf: at a transformers directory"
        )
    model_cfg = (state.get("config") or {}).get("model") or {}
    if int(model_cfg.get("lora_rank") or 0) > 0:
        raise ConfigError(f"hf:{file}: a LoRA checkpoint; merge its adapters into a transformers directory")
    sd = state["model"]
    tok_dir = RunDir(run_of_checkpoint(file)).tokenizer_dir
    if not tok_dir.is_dir():
        raise ConfigError(f"hf:{file}: the run's tokenizer ({tok_dir}) is missing")
    register_model_types()  # a copy head's tokenizer directory names its model type
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    model = rebuild_model(model_cfg, sd, f"hf:{file}: ")
    try:
        model.load_state_dict(sd)
    except RuntimeError as e:
        raise ConfigError(f"hf:{file}: weights do not fit the rebuilt model: {str(e)[:300]}") from None
    return model, tokenizer, dict(state.get("config") or {})


def _check_intact(path: str | Path, file: Path) -> None:
    """``ConfigError`` naming the damaged file when the checkpoint of ``file`` (an ``agentrl train``
    ``state.pt``) fails its check (``agentrl.rundir.checkpoint_damage``: the sizes and sha256 of
    its manifest), with the run's other checkpoints to point ``hf:`` at instead."""
    if file.name != STATE:
        return
    why = checkpoint_damage(file.parent)
    if why is None:
        return
    others = [p.name for p in reversed(RunDir.complete_in(file.parent.parent)) if p != file.parent]
    hint = f"; point hf: at another checkpoint of the run ({', '.join(others[:3])})" if others else ""
    raise ConfigError(f"hf:{path}: damaged checkpoint {why}{hint}")


def _is_model_dir(p: Path) -> bool:
    """Whether ``p`` is a transformers directory rather than an ``agentrl train`` run or checkpoint
    (a run directory holds a ``config.json`` too: its training config, beside ``checkpoints/``)."""
    # config.json here is transformers' model config; the run layout owns only checkpoints/.
    return (
        (p / "config.json").is_file()
        and not (p / SHARDED).exists()
        and not RunDir(p).checkpoints_dir.is_dir()
    )


def checkpoint_run_dir(path: str | Path) -> Path | None:
    """The ``agentrl train`` run directory of ``path`` when ``load_policy_model`` would load it as a
    run or checkpoint (its latest, or the one given); None for a transformers directory or a path
    that holds neither."""
    p = Path(path)
    if not p.exists() or _is_model_dir(p):
        return None
    file = checkpoint_state_file(p)
    return None if file is None else run_of_checkpoint(file)


def load_policy_model(path: str | Path, device: str = "auto") -> LoadedPolicy:
    """The model at ``path`` (module docstring) on ``device``, in eval mode, with its tokenizer.
    ``ConfigError`` names the path when it holds neither a transformers model nor a checkpoint."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.learn.models import register_model_types

    register_model_types()
    p = Path(path)
    dev = pick_device(device)
    if not p.exists():
        raise ConfigError(f"hf:{path}: no such directory")
    if _is_model_dir(p):
        try:
            model = AutoModelForCausalLM.from_pretrained(p, local_files_only=True)
            tokenizer = AutoTokenizer.from_pretrained(p, local_files_only=True)
        except (OSError, ValueError) as e:
            raise ConfigError(f"hf:{path}: cannot load a transformers model there: {str(e)[:300]}") from None
        source, run_dir, run_config = str(p), None, None
    else:
        file = checkpoint_state_file(p)
        if file is None:
            raise ConfigError(
                f"hf:{path}: neither a transformers directory (config.json) nor an agentrl run or checkpoint"
            )
        _check_intact(path, file)
        model, tokenizer, run_config = _from_checkpoint(file)
        source, run_dir = str(file), run_of_checkpoint(file)
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"hf:{path}: the tokenizer has no chat template")
    return LoadedPolicy(model.to(dev).eval(), tokenizer, source, run_dir, run_config)
