"""One REINFORCE++ update (advantages, then actor steps over shuffled mini-batches) on a fixed batch, as
one process or as one rank of ``torchrun`` holding its block of the batch's rows.

``python -m torch.distributed.run --nproc_per_node 2 -m tests.train.rank_update_worker OUT`` writes
rank 0's weights after the update, every rank's advantages and the metrics to OUT; ``update`` is the
same step in the calling process. ``tests/train/test_rank_equality.py`` compares the two.
"""

from __future__ import annotations

import sys

import torch

from agentrl.learn.forward import forward_logprobs
from agentrl.learn.models import build_tiny_model
from agentrl.train.config import AlgorithmConfig
from agentrl.train.distributed import all_gather_objects, init_distributed, rank, world_size
from agentrl.train.update import compute_advantages, update_actor
from tests.gpu.sections.fsdp import leave_group_and_exit

VOCAB = 48
# Outcome rewards: rank 0's half (the user's report) and rank 1's differ in mean and spread, so
# whitening one half alone is a different step.
REWARDS = [1.0, 0.0, 2.5, 0.5, 3.0, 2.0, 2.5, 1.5]
# Mini-batches of 3 of the 8 rows: each one mixes the two ranks' rows differently.
CFG = AlgorithmConfig(name="reinforce_pp", mini_batch_size=3, ppo_epochs=2, micro_batch_tokens=32)


def new_model() -> torch.nn.Module:
    return build_tiny_model(VOCAB, "tiny:layers=1,hidden=32,heads=2,kv_heads=1", seed=0)


def make_batch() -> dict[str, torch.Tensor]:
    """8 right-padded rows: a prompt, a response with a masked tool observation in some rows, the
    outcome reward on the last response token, and ``old_logprobs`` from the initial model."""
    g = torch.Generator().manual_seed(0)
    layouts = []
    for i in range(len(REWARDS)):
        prompt = 2 + i % 3
        mask = [0] * prompt + [1] * (2 + i % 4) + [0] * (2 * (i % 2)) + [1] * (1 + i % 3)
        layouts.append(mask)
    T = max(map(len, layouts))
    B = len(layouts)
    batch = {
        "input_ids": torch.randint(1, VOCAB, (B, T), generator=g),
        "attention_mask": torch.zeros(B, T, dtype=torch.long),
        "loss_mask": torch.zeros(B, T, dtype=torch.long),
        "token_level_scores": torch.zeros(B, T),
    }
    for i, mask in enumerate(layouts):
        n = len(mask)
        batch["attention_mask"][i, :n] = 1
        batch["loss_mask"][i, :n] = torch.tensor(mask)
        batch["token_level_scores"][i, n - 1] = REWARDS[i]
    batch["input_ids"] *= batch["attention_mask"]
    batch["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        batch["old_logprobs"] = forward_logprobs(new_model(), batch)[0]
    return batch


def shard(batch: dict[str, torch.Tensor], r: int, w: int) -> dict[str, torch.Tensor]:
    """Rank r's contiguous block of rows, cut to its own longest row (its own padding)."""
    B = batch["input_ids"].shape[0]
    rows = slice(r * B // w, (r + 1) * B // w)
    width = int(batch["attention_mask"][rows].sum(-1).max())
    return {k: v[rows, :width] for k, v in batch.items()}


def update(batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[list[float]], dict]:
    """The step: REINFORCE++ advantages, then SGD actor steps. Returns the weights, each row's
    advantages on its policy tokens and the update's metrics."""
    model = new_model()
    metrics = compute_advantages(batch, CFG, list(range(len(batch["input_ids"]))))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    gen = torch.Generator().manual_seed(5)
    metrics.update(update_actor(model, opt, batch, CFG, grad_clip=100.0, generator=gen))
    on = batch["loss_mask"].bool()
    advantages = [batch["advantages"][i][on[i]].tolist() for i in range(len(on))]
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, advantages, metrics


def main(out: str) -> None:
    init_distributed()
    state, advantages, metrics = update(shard(make_batch(), rank(), world_size()))
    everyone = [row for part in all_gather_objects(advantages) for row in part]
    if rank() == 0:
        torch.save({"state": state, "advantages": everyone, "metrics": metrics}, out)
    leave_group_and_exit()  # together, skipping the interpreter's teardown (SIGABRT under load)


if __name__ == "__main__":
    main(sys.argv[1])
