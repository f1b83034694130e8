"""``agentrl.learn.compute_advantages`` with an injected reduction: two simulated ranks, each with half
of a PPO batch and a ``reduce_sum`` that sums over both, give the advantages one process gives for
the whole batch (DESIGN.md: "so N ranks compute what one process computes")."""

import threading

import torch

from agentrl.learn import AlgorithmConfig, compute_advantages


def _batch(seed: int = 0, rows: int = 6, length: int = 12) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(rows, length, generator=g) > 0.3).long()
    mask[:, 0] = 0  # the prompt
    scores = torch.zeros(rows, length)
    for i in range(rows):
        last = int(mask[i].nonzero().max())
        scores[i, last] = float(i % 3) - 0.5  # rewards vary within the batch
    return {
        "loss_mask": mask,
        "token_level_scores": scores,
        "values": torch.randn(rows, length, generator=g) * mask,
    }


def _two_ranks(batches: list[dict[str, torch.Tensor]], cfg: AlgorithmConfig) -> None:
    """Run compute_advantages on each batch in its own thread; reduce_sum adds the ranks' floats."""
    barrier = threading.Barrier(len(batches))
    slots = [0.0] * len(batches)

    def run(r: int) -> None:
        def reduce_sum(x: float) -> float:
            slots[r] = x
            barrier.wait()
            total = sum(slots)
            barrier.wait()  # everyone has read the sum before the next call overwrites a slot
            return total

        compute_advantages(batches[r], cfg, list(range(len(batches[r]["loss_mask"]))), reduce_sum=reduce_sum)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_two_ranks_whiten_like_one_process():
    cfg = AlgorithmConfig(name="ppo", gamma=1.0, lam=0.95, whiten_advantages=True)
    whole = _batch()
    halves = [{k: v[:3].clone() for k, v in whole.items()}, {k: v[3:].clone() for k, v in whole.items()}]
    compute_advantages(whole, cfg, list(range(6)))
    _two_ranks(halves, cfg)
    for key in ("raw_advantages", "returns", "advantages"):
        joined = torch.cat([h[key] for h in halves])
        assert torch.allclose(joined, whole[key], atol=1e-5), key
    # each rank alone (no reduction) whitens over its own half only: a different answer
    alone = {k: v[:3].clone() for k, v in whole.items()}
    compute_advantages(alone, cfg, list(range(3)))
    assert not torch.allclose(alone["advantages"], whole["advantages"][:3], atol=1e-3)
