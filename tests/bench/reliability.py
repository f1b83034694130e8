"""Reliability under faults: the judge against a flaky server, and rollouts killed mid-run.

Judge: ``agentrl judge`` (a subprocess: litellm over real HTTP to 127.0.0.1) scores N generated
trajectories against a loopback judge that fails ``--failure-rate`` of its requests with HTTP 500s,
hangs past the client's timeout, non-JSON bodies, non-JSON replies, unknown verdict strings and
missing criteria (seeded by report and attempt, so a run is reproducible). Every output record is
checked: each trajectory exactly once, ``ok`` with exactly its correct score, or ``judge_error``
with a null total. The baseline is the same N against the same server with no faults, measured in
the same run; the ratio of wall times is the price of the faults (mostly backoff).

Rollout: ``agentrl rollout`` (oracle, sandbox) is SIGKILLed ``--kills`` times at random points,
the file cut at a random byte after each kill, and the same command re-run to completion; the
result is compared with an uninterrupted run.

    python -m tests.bench.reliability                 # judge N=1000 at 30% faults; rollout 3 kills
    python -m tests.bench.reliability --n 300 --kills 0
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

from tests.robustness.flaky_judge import FAULTS, run_load
from tests.robustness.interrupt import ROOT, canonical, kill_after, rollout_cmd, run_to_end, tear


def judge_rows(n: int, failure_rate: float, timeout_s: float, max_retries: int, concurrency: int) -> dict:
    """The faulty run and its no-fault baseline; raises if any record is wrong or missing."""
    out = {}
    for name, rate in (("baseline", 0.0), ("faults", failure_rate)):
        with tempfile.TemporaryDirectory() as d:
            r = run_load(
                Path(d), n, via="cli", failure_rate=rate, timeout_s=timeout_s, max_retries=max_retries,
                concurrency=concurrency,
            )  # fmt: skip
        if r.problems:
            raise SystemExit(f"{name}: {len(r.problems)} problems, e.g. {r.problems[:3]}")
        injected = {k: v for k, v in r.injected.items() if k != "none"}
        out[name] = {
            "episodes": n,
            "ok": r.ok,
            "judge_error": r.judge_error,
            "lost": n - r.ok - r.judge_error,
            "requests": r.requests,
            "retries": r.retries,
            "client_calls": r.client_calls,
            "faults_injected": sum(injected.values()),
            "fault_share": round(sum(injected.values()) / r.requests, 3),
            "fault_mix": {k: injected.get(k, 0) for k in FAULTS},
            "judge_errors_by_cause": dict(r.errors),
            "wall_s": round(r.wall_s, 2),
        }
    out["wall_ratio_faults_vs_baseline"] = round(out["faults"]["wall_s"] / out["baseline"]["wall_s"], 2)
    return out


def rollout_rows(kills: int, samples: int, seed: int) -> dict:
    """Kill/tear/resume a sandbox rollout ``kills`` times; compare with an uninterrupted run."""
    from agentrl.env.sandbox import build

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        env = {**os.environ, "AGENTRL_CACHE": str(d / "cache"), "PYTHONPATH": str(ROOT)}
        build(d / "suite", seed=5, companies=10)
        ref_out, out = d / "ref.jsonl", d / "run.jsonl"
        t0 = time.perf_counter()
        run_to_end(rollout_cmd(d / "suite", ref_out, samples), env)
        ref_wall = time.perf_counter() - t0
        reference = canonical(ref_out)
        cmd = rollout_cmd(d / "suite", out, samples)
        torn = lost = 0
        t0 = time.perf_counter()
        for _ in range(kills):
            kill_after(cmd, out, env, lines=rng.randrange(20, max(21, len(reference) // (kills + 1))))
            size = out.stat().st_size
            cut = rng.randrange(size // 2, size)
            lost += tear(out, cut)
            torn += out.read_bytes()[-1:] != b"\n"
        summary = run_to_end(cmd, env)
        wall = time.perf_counter() - t0
        got = canonical(out)
    return {
        "episodes": len(reference),
        "kills": kills,
        "torn_tails_left": torn,
        "complete_records_cut_off": lost,
        "skipped_on_resume": summary["skipped"],
        "run_on_resume": summary["episodes"],
        "duplicates": 0,  # canonical() refuses duplicates and torn lines
        "equal_to_uninterrupted": got == reference,
        "wall_s": round(wall, 2),
        "uninterrupted_wall_s": round(ref_wall, 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="trajectories to judge (1000)")
    parser.add_argument(
        "--failure-rate", type=float, default=0.3, help="share of judge requests that fail (0.3)"
    )
    parser.add_argument("--timeout", type=float, default=1.0, help="the judge's per-call timeout, s (1.0)")
    parser.add_argument("--max-retries", type=int, default=4, help="the judge's transport retries (4)")
    parser.add_argument("--concurrency", type=int, default=32, help="judge calls in flight (32)")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs of the rollout (3; 0 skips it)")
    parser.add_argument("--samples", type=int, default=10, help="rollout samples per task (10 x 110 tasks)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    result: dict = {
        "judge": judge_rows(args.n, args.failure_rate, args.timeout, args.max_retries, args.concurrency)
    }
    j = result["judge"]
    for name in ("baseline", "faults"):
        r = j[name]
        print(
            f"judge {name:<8} {r['episodes']} episodes: ok {r['ok']}, judge_error {r['judge_error']}, lost {r['lost']}; "
            f"{r['requests']} requests ({r['faults_injected']} faults, {r['fault_share']:.1%}), "
            f"{r['retries']} retries, {r['wall_s']:.1f} s"
        )
    print(
        f"judge fault mix {j['faults']['fault_mix']}; judge_error causes {j['faults']['judge_errors_by_cause']}"
    )
    print(f"judge wall time with faults / without: {j['wall_ratio_faults_vs_baseline']:.2f}x")
    if args.kills:
        r = result["rollout"] = rollout_rows(args.kills, args.samples, args.seed)
        print(
            f"rollout {r['episodes']} episodes, {r['kills']} SIGKILLs + cuts ({r['torn_tails_left']} torn tails, "
            f"{r['complete_records_cut_off']} complete records cut off): resume skipped {r['skipped_on_resume']}, "
            f"ran {r['run_on_resume']}; duplicates 0, equal to the uninterrupted run: {r['equal_to_uninterrupted']}; "
            f"{r['wall_s']:.1f} s (uninterrupted {r['uninterrupted_wall_s']:.1f} s)"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
