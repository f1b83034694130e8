"""The supervised warm start before RL: ``sft_steps`` steps on oracle trajectories, resumable mid-way.

Every rank trains on the same batches (under FSDP their summed gradients are averaged); the batches
come from one ``random.Random`` seeded from (seed, "sft-batches"), whose state a warm-start
checkpoint keeps with the warm start's optimiser, so a run resumed at warm-start step k trains
steps k+1.. exactly as an uninterrupted one. With context management (``rollout.context``) the
oracle episodes are played again in token mode once the run's expander exists (``oracle_in_tokens``),
so the warm start trains every context segment as the policy will see it. At the end every rank takes rank 0's weights, the
reference becomes the warm-started policy, and RL step 0 is checkpointed (``agentrl.train.checkpointing``).

A mixin of ``Trainer``.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from agentrl.rollout.context import context_policy
from agentrl.rollout.episode import Limits
from agentrl.stopping import check_stop, stop_requested
from agentrl.train.distributed import all_reduce_sum, broadcast_parameters, world_size
from agentrl.train.fsdp import set_grad_divide
from agentrl.train.sft import collect_oracle_trajectories, sft_step
from agentrl.train.step_sampling import step_seed

__all__ = ["WarmStart"]


class WarmStart:
    """The warm-start half of a ``Trainer`` (see the module docstring)."""

    cfg: Any
    model: torch.nn.Module
    ref: torch.nn.Module | None
    models: Any
    expander: Any
    sft_data: list[Any]
    pad_id: int
    log: Any
    report: Any
    warm_from: int | None
    env_config: dict[str, Any]
    sft_opt: torch.optim.Optimizer | None
    sft_rng: random.Random | None

    def oracle_in_tokens(self, tasks: list[Any]) -> None:
        """The warm start's oracle episodes again (same tasks, samples and seeds), in token mode
        through the run's expander, limits and context policy, so a long one carries the context
        segments the policy's own episodes will have; the chat-mode episodes collected before the
        tokenizer existed gave it its texts (which stay those of a run without context management)."""
        cfg, r = self.cfg, self.cfg.rollout
        limits = Limits(max_new_tokens=r.max_new_tokens, max_len=r.max_len, context=context_policy(r.context))
        with self.report.phase(f"oracle episodes in tokens ({r.context.strategy}, {len(self.sft_data)})"):
            self.sft_data = collect_oracle_trajectories(
                self.env_config, tasks, cfg.sft_noise, cfg.seed, episodes=cfg.sft_episodes,
                expander=self.expander, limits=limits,
            )  # fmt: skip

    def new_warm_start(self) -> None:
        """The warm start's optimiser and batch sampler, fresh (a checkpoint may then restore them)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.sft_opt = torch.optim.AdamW(params, lr=self.cfg.sft_lr)
        self.sft_rng = random.Random(step_seed(self.cfg.seed, "sft-batches"))

    def warm_start(self) -> None:
        """The supervised steps after ``warm_from`` on the oracle trajectories collected at setup;
        then every rank takes rank 0's weights, the reference becomes the warm-started policy, and
        (with a warm start) RL step 0 is checkpointed."""
        cfg = self.cfg
        start = self.warm_from or 0
        if self.sft_data:
            if self.sft_opt is None or self.sft_rng is None:
                self.new_warm_start()
            set_grad_divide(self.model, world_size())
            every = cfg.sft_checkpoint_every
            self.report.sft(0, cfg.sft_steps)  # the warm start begins (or goes on after step `start`)
            for k in range(start + 1, cfg.sft_steps + 1):
                loss = sft_step(
                    self.model,
                    self.sft_opt,
                    self.expander,
                    self.sft_data,
                    batch_size=cfg.sft_batch_size,
                    rng=self.sft_rng,
                    pad_id=self.pad_id,
                    micro_batch_tokens=cfg.algorithm.micro_batch_tokens,
                )
                if self.log is not None:
                    self.log.sft(k, loss)
                self.report.sft(k, cfg.sft_steps, loss)
                if loss == 0.0 and k == start + 1:  # −log p is never exactly 0 where a token is learned
                    self.report.note(
                        f"warning: warm start step {k} had no token to learn from: its trajectories have "
                        f"no policy turn within rollout.max_len ({cfg.rollout.max_len}); are the task "
                        "prompts longer than max_len?"
                    )
                if every and k % every == 0 and k < cfg.sft_steps:
                    self.save_warm(k)  # type: ignore[attr-defined]
                if k < cfg.sft_steps:  # every rank stops here, between steps (all agree)
                    check_stop(all_reduce_sum(float(stop_requested())) > 0)
            set_grad_divide(self.model, 1.0)
        if not self.models.fsdp:  # sharded ranks stay equal by construction
            broadcast_parameters(self.model)
        if self.ref is not None:
            self.ref.load_state_dict(self.model.state_dict())
        self.warm_from = None
        if self.sft_data:
            self.save()  # type: ignore[attr-defined]
        # Done: the warm start's AdamW moments (twice the trained weights: 1 GB for a 135M model) go.
        self.sft_opt, self.sft_rng = None, None
