"""The machine the figures come from: the card, the software, and two ceilings measured on the spot
(a bf16 matrix product and a device-to-device copy), against which the other sections' speeds read.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import platform
import subprocess
from pathlib import Path

import torch

from tests.gpu.report import Recorder
from tests.gpu.shapes import measure

TITLE = "the card, the software, and its matmul and copy ceilings"
BUDGET_S = 30.0

# The packages the kit's numbers depend on; tools/gpu/prepare carries the ones the image lacks.
PACKAGES = ("torch", "transformers", "accelerate", "tokenizers", "safetensors", "numpy", "pydantic",
            "pydantic-core", "gymnasium", "bm25s", "vllm")  # fmt: skip
ROOT = Path(__file__).resolve().parents[3]


def _version(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "not installed"


def _nccl() -> str:
    v = torch.cuda.nccl.version()  # a tuple in torch 2.x, an int in older releases
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def _commit() -> str:
    """The commit the kit was prepared from (``tools/gpu/prepare`` writes it beside the wheels, since
    the device machine gets the working tree without ``.git``), else the checkout's own."""
    stamp = ROOT / ".whl" / "kit.json"
    if stamp.exists():
        return str(json.loads(stamp.read_text()).get("commit", "unknown"))
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# What agentrl imports on the kit's paths from the carried wheels (tools/gpu/wheels.txt).
CARRIED = ("pydantic", "gymnasium", "bm25s", "agentrl.train", "agentrl.env.backends.sandbox")


def run(ctx, rec: Recorder) -> None:  # type: ignore[no-untyped-def]
    dev = ctx.device
    missing = []
    for module in CARRIED:
        try:
            importlib.import_module(module)
        except ImportError as e:
            missing.append(f"{module}: {e}")
    rec.check("imports", not missing, "; ".join(missing) or ", ".join(CARRIED))
    rec.figures({"python": platform.python_version(), "agentrl_commit": _commit(), "device": str(dev)})
    rec.figures({name: _version(name) for name in PACKAGES}, prefix="version/")
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        rec.figures({
            "gpu": p.name, "capability": f"{p.major}.{p.minor}", "gpu_memory_gib": p.total_memory / 2**30,
            "multiprocessors": p.multi_processor_count, "cuda": torch.version.cuda or "",
            "bf16_supported": torch.cuda.is_bf16_supported(),
            "nccl": _nccl(),
            "sdpa_flash_available": torch.backends.cuda.is_flash_attention_available(),
        })  # fmt: skip
        rec.check("bf16", torch.cuda.is_bf16_supported(), p.name)
    # Ceilings: what the card does at best, measured here (the median of repeats after a warm-up).
    n, copy_bytes, reps = (8192, 2**30, 10) if not ctx.dry_run else (256, 2**23, 3)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    times = []
    for _ in range(reps + 1):
        with measure(dev) as c:
            a @ b
        times.append(c.seconds)
    rec.figure(
        f"matmul_{str(dtype).removeprefix('torch.')}_tflops", 2 * n**3 / sorted(times[1:])[reps // 2] / 1e12
    )
    x = torch.empty(copy_bytes // 4, device=dev, dtype=torch.float32).normal_()
    y = torch.empty_like(x)
    times = []
    for _ in range(reps + 1):
        with measure(dev) as c:
            y.copy_(x)
        times.append(c.seconds)
    rec.figure("copy_gb_per_s", 2 * copy_bytes / sorted(times[1:])[reps // 2] / 1e9)  # bytes read + written
