"""The run's models, built in one place: tokenizer, policy (LoRA), reference, critic, FSDP sharding,
optimisers, learning-rate schedule and KL controller.

``load_tokenizer`` and ``build_models`` are what ``Trainer.setup`` calls; the order in which they
draw from the global RNG (policy, then reference copy, then critic head) is part of a run's
reproducibility, so it is kept here once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.algos import AdaptiveKLController, FixedKLController
from agentrl.errors import ConfigError
from agentrl.learn.forward import set_logits_chunk
from agentrl.learn.memory import checkpointing_choice, enable_checkpointing
from agentrl.learn.models import (
    ValueModel,
    build_tiny_model,
    frozen_copy,
    register_model_types,
    train_last_layers,
)
from agentrl.train.config import OptimConfig, TrainConfig
from agentrl.train.distributed import broadcast_parameters, world_size
from agentrl.train.fsdp import shard_model

__all__ = ["Models", "build_models", "load_tokenizer", "lr_lambda", "tokenizer_source"]

Modules = dict[str, tuple[torch.nn.Module, torch.optim.Optimizer | None]]


@dataclass
class Models:
    """The trainable state of a run (``ref``, ``critic`` and ``critic_opt`` are None when unused)."""

    policy: torch.nn.Module
    ref: torch.nn.Module | None
    critic: torch.nn.Module | None
    opt: torch.optim.Optimizer
    critic_opt: torch.optim.Optimizer | None
    sched: torch.optim.lr_scheduler.LambdaLR
    kl_ctrl: AdaptiveKLController | FixedKLController
    lora: bool  # with LoRA the reference is the policy with its adapters disabled
    uses_ref: bool  # a KL term needs reference log-probs
    fsdp: bool  # policy, reference and critic are sharded over the ranks
    checkpointing: str  # the run log's line: gradient checkpointing on or off, and why

    def checkpointed(self) -> Modules:
        """Name → (module, its optimiser) of everything a checkpoint holds, in the checkpoint's keys."""
        mods: Modules = {"model": (self.policy, self.opt)}
        if self.critic is not None:
            mods["critic"] = (self.critic, self.critic_opt)
        if self.ref is not None:
            mods["ref"] = (self.ref, None)
        return mods


def tokenizer_source(cfg: TrainConfig, saved: Path, resume: bool) -> str:
    """Where ``load_tokenizer`` takes the tokenizer from, in words (for the progress display)."""
    m = cfg.model
    if resume and saved.exists():
        return f"the run's own, {saved}"
    if m.tokenizer or not m.path.startswith("tiny:"):
        return m.tokenizer or m.path
    longest = (
        f", tokens of at most {m.tokenizer_max_token_length} characters"
        if m.tokenizer_max_token_length
        else ""
    )
    return f"trained in-process, vocabulary {m.tokenizer_vocab_size}{longest}"


def _pretrained(loader: Any, field: str, name: str | Path, **kwargs: Any) -> Any:
    """``loader.from_pretrained(name)``, with a failure (a directory that is not a model, a hub id
    that cannot be fetched) as one ``ConfigError`` naming the field."""
    try:
        return loader.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{field} {str(name)!r}: cannot load it: {first}") from None


def load_tokenizer(cfg: TrainConfig, saved: Path, resume: bool, texts: Callable[[], Sequence[str]]) -> Any:
    """The run's tokenizer: the one saved in the run directory when resuming, the model's own, or
    (``tiny:`` models without one) a chat tokenizer trained on ``texts()``; saved under ``saved``
    so the run directory is self-contained for replay/explain/report."""
    from transformers import AutoTokenizer

    m = cfg.model
    if resume and saved.exists():
        return _pretrained(AutoTokenizer, "the run's tokenizer", saved)
    if m.tokenizer or not m.path.startswith("tiny:"):
        register_model_types()  # a copy-head model's directory: its config type is known first
        field = "model.tokenizer" if m.tokenizer else "model.path"
        tok = _pretrained(AutoTokenizer, field, m.tokenizer or m.path)
    else:
        from agentrl.train.tokenizer import train_chat_tokenizer

        tok = train_chat_tokenizer(list(texts()), m.tokenizer_vocab_size, m.tokenizer_max_token_length)
    tok.save_pretrained(saved)
    return tok


def _policy(cfg: TrainConfig, vocab_size: int, device: torch.device) -> tuple[torch.nn.Module, str]:
    """The policy on ``device``, its trained layers marked, checkpointing chosen (and the log line
    saying why), LoRA adapters added."""
    m = cfg.model
    if m.path.startswith("tiny:"):
        model = build_tiny_model(vocab_size, m.path, seed=cfg.seed)
    else:
        from transformers import AutoModelForCausalLM

        register_model_types()  # a run of a copy-head model, given as its directory
        # "auto" keeps float32 master weights; on a GPU the forward passes run under bf16 autocast.
        dtype = {
            "auto": torch.float32,
            "float32": torch.float32,
            "bfloat16": torch.bfloat16,
            "float16": torch.float16,
        }
        model = _pretrained(AutoModelForCausalLM, "model.path", m.path, dtype=dtype[m.dtype])
    set_logits_chunk(model, m.logits_chunk_tokens)  # the reference, a deep copy, inherits it
    if m.trainable_layers > 0:
        train_last_layers(model, m.trainable_layers)
    model = model.to(device)
    a, max_len = cfg.algorithm, cfg.rollout.max_len
    on, why = checkpointing_choice(
        model, m.gradient_checkpointing, max(a.micro_batch_tokens, max_len), m.activation_memory_mb,
        line=max_len, packed=a.pack_sequences,
    )  # fmt: skip
    if on:
        enable_checkpointing(model)
    if m.lora_rank > 0:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            raise ConfigError("model.lora_rank > 0 needs peft: pip install peft") from None
        model = get_peft_model(model, LoraConfig(r=m.lora_rank, lora_alpha=2 * m.lora_rank))
    return model, why


def lr_lambda(o: OptimConfig, steps: int) -> Callable[[int], float]:
    """The learning-rate multiplier of each step: linear warm-up, then constant, cosine or linear."""
    total = max(steps, 1)

    def factor(step: int) -> float:
        if step < o.warmup_steps:
            return (step + 1) / (o.warmup_steps + 1)
        frac = (step - o.warmup_steps) / max(total - o.warmup_steps, 1)
        if o.schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
        if o.schedule == "linear":
            return max(0.0, 1.0 - frac)
        return 1.0

    return factor


def build_models(cfg: TrainConfig, vocab_size: int, device: torch.device) -> Models:
    """Policy (with LoRA adapters when ``model.lora_rank > 0``), reference, critic (PPO), FSDP2
    sharding under torchrun with ``parallelism: fsdp``, AdamW optimisers, schedule, KL controller."""
    a, o = cfg.algorithm, cfg.optim
    policy, checkpointing = _policy(cfg, vocab_size, device)
    lora = cfg.model.lora_rank > 0
    uses_ref = a.kl_in_reward or a.kl_loss_coef > 0
    ref = frozen_copy(policy) if uses_ref and not lora else None
    critic = None
    if a.needs_critic:
        critic = ValueModel.from_policy(policy, shared=cfg.model.critic_backbone == "shared")
        critic.to(device)
        broadcast_parameters(critic)
    fsdp = cfg.parallelism == "fsdp" and world_size() > 1
    if fsdp:  # every rank starts from rank 0's weights, then keeps only its shards
        if critic is not None and cfg.model.critic_backbone == "shared":
            raise ConfigError("parallelism: fsdp needs model.critic_backbone: separate")
        for module in (policy, ref, critic):
            if module is not None:
                broadcast_parameters(module)
                shard_model(module, mixed_precision=device.type == "cuda")
    opt = torch.optim.AdamW(
        [p for p in policy.parameters() if p.requires_grad],
        lr=o.lr,
        betas=o.betas,
        weight_decay=o.weight_decay,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(o, cfg.steps))
    critic_opt = None
    if critic is not None:
        critic_opt = torch.optim.AdamW(
            [p for p in critic.parameters() if p.requires_grad],
            lr=o.critic_lr,
            betas=o.betas,
            weight_decay=o.weight_decay,
        )
    kl_ctrl = (
        AdaptiveKLController(a.kl_coef, a.kl_target, a.kl_horizon)
        if a.kl_target is not None
        else FixedKLController(a.kl_coef)
    )
    return Models(policy, ref, critic, opt, critic_opt, sched, kl_ctrl, lora, uses_ref, fsdp, checkpointing)
