"""Log-probabilities on the policy's tokens only: the LM head and log-softmax on the loss-masked
positions (``forward_logprobs(..., policy_only=True)``) against the full pass, forward + backward.

    python -m tests.bench.policy_logprobs [--rows 16] [--length 740] [--policy-frac 0.18] [--repeats 3]

A batch shaped like the quickstart's (16 rows of ~740 tokens, about 18% of them the policy's turns),
on a tiny Qwen2 model (2 layers, hidden 128) at the quickstart's vocabulary (2,048), SmolLM2's
(49,152) and Qwen's (151,936). Each case runs in its own process, so its peak RSS (``ru_maxrss``)
is its own; the table gives seconds per forward + backward and peak RSS for both paths, and
their ratios (measured in the same run: the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

VOCABS = (2048, 49152, 151936)


def _case(vocab: int, policy_only: bool, rows: int, length: int, frac: float, repeats: int) -> dict:
    import resource

    import torch

    from agentrl.learn.forward import forward_logprobs
    from agentrl.learn.models import build_tiny_model

    torch.manual_seed(0)
    model = build_tiny_model(vocab, "tiny:layers=2,hidden=128,heads=4,kv_heads=2")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, length), generator=g)
    mask = torch.zeros(rows, length, dtype=torch.long)
    for r in range(rows):  # policy turns of ~40 tokens between observations
        pos = int(40 / frac) // 2
        while pos + 40 < length:
            mask[r, pos : pos + 40] = 1
            pos += int(40 / frac)
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(length).expand(rows, -1).contiguous(),
        "loss_mask": mask,
    }
    times = []
    for _ in range(repeats + 1):  # the first pass warms up
        t0 = time.perf_counter()
        lp, ent = forward_logprobs(model, batch, with_entropy=True, policy_only=policy_only)
        (-(lp * mask).sum() / mask.sum() - 0.01 * (ent * mask).sum() / mask.sum()).backward()
        times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": min(times[1:]), "peak_rss_mb": rss_mb, "policy_frac": float(mask.float().mean())}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--length", type=int, default=740)
    ap.add_argument("--policy-frac", type=float, default=0.18)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--vocab", type=int, nargs="*", default=list(VOCABS))
    ap.add_argument("--case", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.case:
        vocab, mode = a.case.split(":")
        print(json.dumps(_case(int(vocab), mode == "policy", a.rows, a.length, a.policy_frac, a.repeats)))
        return
    print(f"{a.rows} rows x {a.length} tokens; forward + backward with entropy; min of {a.repeats}")
    print(
        f"{'vocab':>8} {'full s':>8} {'policy s':>9} {'speed-up':>9} {'full MB':>8} {'policy MB':>10} {'RSS ratio':>9}"
    )
    for vocab in a.vocab:
        res = {}
        for mode in ("full", "policy"):
            cmd = [sys.executable, "-m", "tests.bench.policy_logprobs", "--case", f"{vocab}:{mode}"]
            cmd += ["--rows", str(a.rows), "--length", str(a.length), "--policy-frac", str(a.policy_frac)]
            cmd += ["--repeats", str(a.repeats)]
            run = subprocess.run(cmd, capture_output=True, text=True)
            res[mode] = json.loads(run.stdout.strip().splitlines()[-1]) if run.returncode == 0 else None
        f, p = res["full"], res["policy"]
        if f is None or p is None:  # killed: out of memory on this machine
            print(
                f"{vocab:>8} "
                + " ".join(f"{k}: {'killed (out of memory)' if v is None else v}" for k, v in res.items())
            )
            continue
        print(
            f"{vocab:>8} {f['seconds']:>8.2f} {p['seconds']:>9.2f} {f['seconds'] / p['seconds']:>8.1f}x"
            f" {f['peak_rss_mb']:>8.0f} {p['peak_rss_mb']:>10.0f} {f['peak_rss_mb'] / p['peak_rss_mb']:>8.1f}x"
        )
    if res.get("policy"):
        print(f"policy tokens: {res['policy']['policy_frac']:.0%} of the batch")


if __name__ == "__main__":
    main()
