"""The GPU acceptance kit: runs its sections one after the other within a time budget and writes the
report (``report.json``, ``report.md``) after each, so a run cut short still returns its figures.

    python -m tests.gpu.kit --out DIR                 # GPU mode when CUDA is there, else the dry run
    python -m tests.gpu.kit --out DIR --dry-run       # tiny shapes on the CPU (what CI runs)
    python -m tests.gpu.kit --out DIR --sections step,logprob_gap --budget step=200

On a GPU each section runs in a process of its own (``--isolate``, the default there): its peak
memory is its own, a CUDA error or an out-of-memory cannot poison the next section, and a section
that outlives its budget is killed with what it had recorded kept (status ``timeout``). The dry run
runs the sections in this process (seconds, not a fresh torch import each). ``tools/gpu/run`` is the
command for the GPU machine; docs/gpu.md says what each figure means.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.gpu.report import Recorder, Report, SectionResult, load_result

if TYPE_CHECKING:
    import torch

__all__ = ["ORDER", "Ctx", "main", "run_kit", "run_section"]

ORDER = ("device", "attention", "step", "logprob_gap", "fsdp", "ranks", "vllm", "quickstart")
TOTAL_BUDGET_S = 480.0  # the device machine's 10-minute command, less its start, installs and margin
RESERVE_S = 5.0  # kept back from the total for writing the report
MIN_BUDGET_S = 10.0  # a section given less is skipped rather than started


@dataclass
class Ctx:
    """What a section runs with: the device, whether this is the dry run (tiny shapes), a scratch
    directory of its own, the report folder (for a file that should come back), and its deadline
    (``time.monotonic()``; on a GPU the runner kills the section then)."""

    device_name: str  # "cuda", "cuda:0" or "cpu" (torch is imported by the sections that use it)
    dry_run: bool
    scratch: Path
    out: Path
    deadline: float

    @property
    def device(self) -> torch.device:
        import torch

        return torch.device(self.device_name)

    def left(self) -> float:
        """Seconds left before the deadline."""
        return self.deadline - time.monotonic()

    def shape(self, name: str) -> str:
        """The model shape to build: ``name`` on a GPU, its tiny stand-in in the dry run."""
        if not self.dry_run:
            return name
        return "dry-2" if name == "1.5B" else "dry"


def _module(name: str):  # type: ignore[no-untyped-def]
    """A section's module: ``tests.gpu.sections.NAME``, or a dotted module path (the kit's tests)."""
    return importlib.import_module(name if "." in name else f"tests.gpu.sections.{name}")


def run_section(name: str, ctx: Ctx, rec: Recorder) -> SectionResult:
    """Run one section in this process: its status is ``ok`` when it ran to the end with every
    check held, ``failed`` (with the exception or the checks that did not hold) or ``skipped``."""
    res = rec.result
    t0 = time.monotonic()
    try:
        _module(name).run(ctx, rec)
    except Exception as e:
        traceback.print_exc()
        res.status, res.reason = (
            "failed",
            f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
        )
    res.seconds = time.monotonic() - t0
    if res.status == "pending":
        bad = [k for k, c in res.checks.items() if not c.ok]
        res.status = "failed" if bad else "ok"
        res.reason = f"check did not hold: {', '.join(bad)}" if bad else None
    rec.flush()
    return res


def _isolated(name: str, ctx: Ctx, budget: float, res: SectionResult, log: Path) -> SectionResult:
    """Run one section in a child process (``--section``), killed with its process group at its
    budget; returns what it recorded."""
    result = ctx.scratch / f"{name}.result.json"
    cmd = [sys.executable, "-m", "tests.gpu.kit", "--section", name, "--result", str(result)]
    cmd += ["--device", ctx.device_name, "--out", str(ctx.out), "--scratch", str(ctx.scratch)]
    # time.monotonic() is the system's monotonic clock: the child keeps the parent's deadline
    cmd += ["--deadline", repr(ctx.deadline)] + (["--dry-run"] if ctx.dry_run else [])
    Recorder(res, result).flush()
    t0 = time.monotonic()
    with log.open("a") as fh:
        fh.write(f"\n===== {name} (budget {budget:.0f} s) =====\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the section and whatever it started (a trainer)
            proc.wait()
            code = None
    got = load_result(result) or res
    got.seconds = time.monotonic() - t0
    got.budget_s = budget
    if code is None:
        got.status, got.reason = "timeout", f"killed at its budget of {budget:.0f} s; figures so far kept"
    elif got.status == "pending":
        got.status, got.reason = "failed", f"the section's process exited with code {code} (see kit.log)"
    return got


def run_kit(
    out: Path,
    *,
    dry_run: bool,
    device: str,
    sections: tuple[str, ...] = ORDER,
    budgets: dict[str, float] | None = None,
    total_budget: float = TOTAL_BUDGET_S,
    isolate: bool = False,
    command: str = "",
) -> Report:
    """Run ``sections`` in order and return the report, written to ``out`` after every section.
    Each section gets its module's ``BUDGET_S`` (or ``budgets[name]``; None: what is left), never
    more than what the total budget has left."""
    start = time.monotonic()
    report = Report(
        mode="dry-run" if dry_run else "gpu",
        device=_device_label(device),
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        command=command,
        budget_s=total_budget if total_budget != float("inf") else None,
    )
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="agentrl-gpu-kit-"))
    try:
        for name in sections:
            mod = _module(name)
            res = SectionResult(name=name, title=mod.TITLE, reason="running when the kit stopped")
            left = total_budget - (time.monotonic() - start) - RESERVE_S
            wanted = (budgets or {}).get(name, mod.BUDGET_S)
            budget = left if wanted is None else min(wanted, left)
            res.budget_s = budget if budget != float("inf") else None
            report.sections.append(res)  # shown as pending should the whole kit be killed now
            report.write(out)
            if budget < MIN_BUDGET_S:
                res.status, res.reason = "skipped", f"no time left in the kit's budget ({max(left, 0):.0f} s)"
            else:
                res.reason = None
                ctx = Ctx(device, dry_run, scratch / name, out, time.monotonic() + budget)
                ctx.scratch.mkdir(parents=True, exist_ok=True)
                print(f"[kit] {name}: budget {budget:.0f} s", flush=True)
                if isolate:
                    res = _isolated(name, ctx, budget, res, out / "kit.log")
                else:
                    res = run_section(name, ctx, Recorder(res))
            print(f"[kit] {name}: {res.status}" + (f" ({res.reason})" if res.reason else ""), flush=True)
            report.sections[-1] = res
            report.seconds = time.monotonic() - start
            report.write(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report


def _device_label(device: str) -> str:
    if not device.startswith("cuda"):
        return device
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def _parse_budgets(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        name, _, secs = item.partition("=")
        if name not in ORDER or not secs:
            raise SystemExit(
                f"--budget {item!r}: expected SECTION=SECONDS with SECTION among {', '.join(ORDER)}"
            )
        out[name] = float(secs)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu-report", help="report folder ($OUT)")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes (on the CPU unless --device)")
    ap.add_argument("--device", default="auto", help="auto (cuda when available), cuda or cpu")
    ap.add_argument("--sections", default=",".join(ORDER), help="comma-separated, run in this order")
    ap.add_argument("--budget", action="append", default=[], help="SECTION=SECONDS (repeatable)")
    ap.add_argument("--total-budget", type=float, default=None, help=f"seconds (GPU: {TOTAL_BUDGET_S:.0f})")
    ap.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="one process per section (default on a GPU)")  # fmt: skip
    # A section's own process (the runner's --isolate child).
    ap.add_argument("--section", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--scratch", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=float("inf"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    out = Path(a.out)
    if a.section:  # the child of an isolated run: the runner gave it its device
        ctx = Ctx(a.device, a.dry_run, Path(a.scratch) / a.section, out, a.deadline)
        ctx.scratch.mkdir(parents=True, exist_ok=True)
        res = load_result(Path(a.result)) or SectionResult(name=a.section)
        res = run_section(a.section, ctx, Recorder(res, Path(a.result)))
        return 0 if res.status in ("ok", "skipped") else 1
    import torch

    cuda = torch.cuda.is_available()
    device = ("cuda" if cuda and not a.dry_run else "cpu") if a.device == "auto" else a.device
    device = "cuda:0" if device == "cuda" else device  # an index: torch.cuda.set_device needs one
    dry_run = a.dry_run or not device.startswith("cuda")
    names = tuple(s.strip() for s in a.sections.split(",") if s.strip())
    unknown = [s for s in names if s not in ORDER]
    if unknown:
        raise SystemExit(f"--sections: unknown {', '.join(unknown)}; known: {', '.join(ORDER)}")
    report = run_kit(
        out, dry_run=dry_run, device=device, sections=names, budgets=_parse_budgets(a.budget),
        total_budget=a.total_budget or (TOTAL_BUDGET_S if not dry_run else float("inf")),
        isolate=(not dry_run) if a.isolate is None else a.isolate,
        command=" ".join(["python -m tests.gpu.kit", *(argv if argv is not None else sys.argv[1:])]),
    )  # fmt: skip
    print((out / "report.md").read_text().split("\n## ")[0], flush=True)
    return 0 if all(s.status in ("ok", "skipped") for s in report.sections) else 1


if __name__ == "__main__":
    sys.exit(main())
