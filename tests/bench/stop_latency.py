"""How long ``agentrl train`` takes to stop after Ctrl-C or SIGTERM in the middle of an RL step.

    OMP_NUM_THREADS=2 python -m tests.bench.stop_latency [--signal SIGTERM SIGINT]
        [--sampler thread process] [--steps 4] [--sft-steps 20] [--out DIR]

The quickstart (``examples/quickstart.yaml``) with long turns (``rollout.max_new_tokens`` 600, 8
turns, so a step's rollout lasts seconds), started as a subprocess; the signal is sent 0.2 s after
the line of RL step 1, i.e. inside step 2. The table gives the seconds from the signal to the
``interrupted: ...`` line (the run has stopped and written its summary) and to the process's exit
(the interpreter's own teardown after that), the exit status, and whether stderr holds a traceback.
``--sampler process`` runs ``rollout.staleness: 1`` with the sampler in a child process.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def stop_once(sig: str, sampler: str, steps: int, sft_steps: int, out: Path) -> dict:
    """One run stopped by ``sig`` inside RL step 2: seconds to the ``interrupted`` line and to exit."""
    cmd = [
        sys.executable, "-m", "agentrl", "train", str(ROOT / "examples" / "quickstart.yaml"),
        "--no-progress", "--set", f"output_dir={out}", "--set", f"steps={steps}",
        "--set", f"sft_steps={sft_steps}", "--set", "rollout.max_new_tokens=600",
        "--set", "rollout.max_len=3000", "--set", "rollout.max_turns=8",
        "--set", "eval.before_train=false", "--set", "eval.at_end=false",
    ]  # fmt: skip
    if sampler == "process":
        cmd += ["--set", "rollout.staleness=1", "--set", "rollout.sampler=process"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    sent: list[float] = []
    said: list[float] = []
    err: list[str] = []

    def read() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            err.append(line)
            if not sent and line.startswith("step 1/"):
                time.sleep(0.2)
                proc.send_signal(getattr(signal, sig))
                sent.append(time.monotonic())
            if line.startswith("interrupted"):
                said.append(time.monotonic())

    reader = threading.Thread(target=read)
    reader.start()
    rc = proc.wait(timeout=600)
    end = time.monotonic()
    reader.join()
    if not sent:
        raise SystemExit(f"the run ended before step 1 was shown (rc {rc}): {''.join(err)[-1000:]}")
    return {
        "signal": sig,
        "sampler": sampler,
        "to_line_s": (said[0] - sent[0]) if said else float("nan"),
        "to_exit_s": end - sent[0],
        "rc": rc,
        "traceback": any("Traceback" in line for line in err),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--signal", nargs="*", default=["SIGTERM", "SIGINT"])
    ap.add_argument("--sampler", nargs="*", default=["thread", "process"])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--sft-steps", type=int, default=20)
    ap.add_argument("--out", default=None, help="where the runs go (default: a temporary directory)")
    a = ap.parse_args(argv)
    base = Path(a.out or tempfile.mkdtemp(prefix="stop-latency-"))
    print("| signal | sampler | to 'interrupted' (s) | to exit (s) | exit status | traceback |")
    print("|---|---|---|---|---|---|")
    for sampler in a.sampler:
        for sig in a.signal:
            r = stop_once(sig, sampler, a.steps, a.sft_steps, base / f"{sampler}-{sig}")
            print(
                f"| {r['signal']} | {r['sampler']} | {r['to_line_s']:.2f} | {r['to_exit_s']:.2f} | "
                f"{r['rc']} | {'yes' if r['traceback'] else 'no'} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
