"""The copy head's update cost: the policy's tokens alone against the whole pass.

    OMP_NUM_THREADS=2 python -m tests.bench.copy_update [--episodes 32] [--repeats 3] [--model base:research-tiny]

``forward_logprobs(policy_only=True)`` on a copy head (``agentrl.learn.copy_lm``) runs the pointer's
queries and the [N, V] mixture at the policy's tokens alone (``logits_at``); the whole pass builds
them at every token of every row. Both are timed forward and backward, alternately in one process,
on ``--episodes`` noisy oracle episodes of the quickstart suite (the size of one GRPO step: 8 tasks
× 4 samples), packed in micro-batches of 8,192 tokens as the quickstart's update packs them; printed:
the median seconds of each, their ratio, the share of tokens that are the policy's, and the largest
log-prob difference between the two (they compute the same thing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _batch(model_dir: str, episodes: int) -> dict[str, torch.Tensor]:
    from transformers import AutoTokenizer

    from agentrl.env.suite import load_suite
    from agentrl.tokens import collate, sampling_spec
    from agentrl.train.research_base import ENV
    from agentrl.train.sft import collect_oracle_trajectories, sft_rows

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    suite_dir = str(ROOT / "examples" / "quickstart-env")
    tasks = load_suite(suite_dir).tasks_in("train")
    env = {**json.loads(json.dumps(ENV)), "suite": suite_dir}
    trajs = collect_oracle_trajectories(env, tasks, 0.5, 0, episodes=episodes)
    expander = sampling_spec(tokenizer, max_len=1536, max_new_tokens=80).expander(tokenizer)
    return collate(sft_rows(expander, trajs), pad_token_id=tokenizer.pad_token_id)


def _timed(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], policy_only: bool
) -> tuple[float, torch.Tensor]:
    from agentrl.learn.forward import forward_logprobs, micro_batches

    t0 = time.perf_counter()
    out = torch.zeros(batch["input_ids"].shape)
    for mb in micro_batches(batch, torch.arange(len(batch["input_ids"])), 8192, packed=True):
        lp, _ = forward_logprobs(model, mb, with_entropy=True, pack=True, policy_only=policy_only)
        (lp * mb["loss_mask"]).sum().backward()
        out[mb["_rows"], : lp.shape[1]] = lp.detach() * mb["loss_mask"]
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> dict[str, float]:
    from transformers import AutoModelForCausalLM

    from agentrl.learn.bases import resolve_model
    from agentrl.learn.models import register_model_types
    from agentrl.train.research_base import cpu_name

    ap = argparse.ArgumentParser(
        prog="python -m tests.bench.copy_update", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--model", default="base:research-tiny", help="a copy-head model directory or base:NAME")
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    model_dir = resolve_model(args.model)
    register_model_types()
    model = AutoModelForCausalLM.from_pretrained(model_dir).train()
    batch = _batch(model_dir, args.episodes)
    times: dict[bool, list[float]] = {True: [], False: []}
    diff = 0.0
    for _ in range(args.repeats):
        t_only, lp_only = _timed(model, batch, True)
        t_whole, lp_whole = _timed(model, batch, False)
        times[True].append(t_only)
        times[False].append(t_whole)
        diff = max(diff, float((lp_only - lp_whole).abs().max()))
    policy = float(batch["loss_mask"].sum() / batch["attention_mask"].sum())
    only, whole = statistics.median(times[True]), statistics.median(times[False])
    result = {
        "policy_only_s": only,
        "whole_s": whole,
        "ratio": whole / only,
        "policy_share": policy,
        "max_diff": diff,
    }
    print(
        f"{cpu_name()}, {torch.get_num_threads()} threads, kernels {torch.backends.cpu.get_cpu_capability()}: "
        f"{args.episodes} episodes, {int(batch['attention_mask'].sum())} tokens ({policy:.0%} the policy's); "
        f"forward+backward, median of {args.repeats}: policy tokens alone {only:.2f} s, whole pass "
        f"{whole:.2f} s ({whole / only:.1f}x); largest log-prob difference {diff:.1e}"
    )
    return result


if __name__ == "__main__":
    main()
