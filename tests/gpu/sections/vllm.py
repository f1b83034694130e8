"""vLLM as the sampler: generation through agentrl's client (token ids in, token ids and log-probs
out), the sampler-vs-trainer gap with a real bf16 engine, and a full weight sync (``vllm.sync: full``:
save, ``reload_weights``, reset the prefix cache) that must bring the server's log-probs onto the
trainer's. The server starts on other (placeholder) weights, so only a sync that reached it closes
the gap. Without vLLM the section is skipped with the reason; the dry run runs the same client, sync
and comparison against ``tests/policy_vllm/fake_vllm.py``, the fake server the vLLM tests use.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from tests.gpu.report import Recorder
from tests.gpu.sections.fsdp import free_port
from tests.gpu.sections.logprob_gap import compare, sharpen
from tests.gpu.shapes import layout, random_lm

TITLE = "vLLM generation and full weight sync (skipped where vLLM is not importable)"
BUDGET_S = 120.0
NO_VLLM = ("vllm is not importable: the GPU image has no vLLM, and its wheels (hundreds of MB with "
           "their CUDA dependencies) cannot travel in the 64 MiB working tree")  # fmt: skip


def _texts() -> list[str]:
    words = [
        "search",
        "open",
        "answer",
        "revenue",
        "quarter",
        "report",
        "cloud",
        "filing",
        "page",
        "result",
        "the",
        "of",
        "in",
    ]
    return [" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) for i in range(200)]


def _start_vllm(model_dir: Path, port: int, log: Path, deadline: float) -> subprocess.Popen:
    """vLLM's OpenAI-compatible server on ``model_dir`` as agentrl's engine needs it (``vllm serve``'s
    flags of docs/vllm.md); returns once ``/health`` answers."""
    import httpx

    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--port", str(port), "--served-model-name", "policy", "--logprobs-mode", "processed_logprobs",
           "--dtype", "bfloat16", "--gpu-memory-utilization", "0.3", "--max-model-len", "2048",
           "--enforce-eager"]  # fmt: skip
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    proc = subprocess.Popen(
        cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited with code {proc.returncode}: {log.read_text()[-300:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGKILL)
    raise TimeoutError("vllm serve did not answer /health in time")


def _served(url: str, prompts: list[list[int]], new: int) -> tuple[list, float]:
    """Every prompt sampled by the server at once (temperature 1, seeded); the generations and seconds."""
    from agentrl.sampling.vllm_client import VLLMClient

    async def go():  # type: ignore[no-untyped-def]
        async with VLLMClient(url, "policy") as c:
            await c.check_version()
            return await asyncio.gather(
                *(c.generate(p, max_tokens=new, seed=i) for i, p in enumerate(prompts))
            )

    t0 = time.perf_counter()
    gens = asyncio.run(go())
    return gens, time.perf_counter() - t0


def run(ctx, rec: Recorder) -> None:  # type: ignore[no-untyped-def]
    from agentrl.sampling.vllm_sync import WeightSync
    from agentrl.train.tokenizer import train_chat_tokenizer

    real = importlib.util.find_spec("vllm") is not None
    if not real and not ctx.dry_run:
        rec.skip(NO_VLLM)
        return
    dev = ctx.device
    rows, prompt, new = (32, 256, 128) if real and not ctx.dry_run else (3, 8, 6)
    tok = train_chat_tokenizer(_texts(), 400)
    trainer = random_lm("dry", dev, seed=1, vocab=len(tok))
    placeholder = random_lm("dry", torch.device("cpu"), seed=2, vocab=len(tok))
    for model in (trainer, placeholder):
        sharpen(model)
    serve_dir = ctx.scratch / "serve"
    placeholder.save_pretrained(serve_dir)
    tok.save_pretrained(serve_dir)
    server, proc = None, None
    if real:
        port = free_port()
        proc = _start_vllm(serve_dir, port, ctx.scratch / "vllm.log", ctx.deadline - 60)
        url = f"http://127.0.0.1:{port}"
    else:
        from tests.policy_vllm.fake_vllm import FakeVLLM

        server = FakeVLLM(model=placeholder, model_dir=serve_dir)
        url = server.url
    rec.figures({"server": "vllm" if real else "fake (tests/policy_vllm/fake_vllm.py)", "rows": rows,
                 "prompt_tokens": prompt, "new_tokens": new})  # fmt: skip
    sync = WeightSync("full", url + "/v1", "policy", sync_dir=serve_dir, tokenizer=tok)
    try:
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(0, len(tok), (prompt,), generator=g).tolist() for _ in range(rows)]
        kl = {}
        for when in ("before_sync", "after_sync"):
            if when == "after_sync":
                t0 = time.perf_counter()
                sync.push(trainer, 0)
                rec.figure("sync_s", time.perf_counter() - t0)
            gens, secs = _served(url, prompts, new)
            batch = layout(prompts, [x.token_ids for x in gens], [x.logprobs for x in gens], dev)
            row = {"when": when, "generate_tok_s": sum(len(x.token_ids) for x in gens) / secs,
                   **compare(trainer, batch)}  # fmt: skip
            rec.row("served", row)
            kl[when] = abs(row["kl"])
        rec.check("sync_reached_server", kl["after_sync"] < 0.1 * kl["before_sync"],
                  "|KL| after the sync < a tenth of |KL| before it (placeholder weights)")  # fmt: skip
        if not real:  # the fake samples in float32 as the trainer computes: they must agree
            rec.check(
                "fake_equals_trainer", row["max_abs_diff"] < 1e-3, "max |Δ log p| < 1e-3 after the sync"
            )
    finally:
        sync.close()
        if server is not None:
            server.close()
        if proc is not None:
            os.killpg(proc.pid, signal.SIGKILL)
