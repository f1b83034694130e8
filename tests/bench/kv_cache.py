"""Prefill tokens per turn and rollout seconds per step, with and without per-episode KV caches
(``rollout.kv_cache``), through the trainer's HF engine.

    OMP_NUM_THREADS=2 python -m tests.bench.kv_cache [--model quickstart|smollm2] [--layers 30] \\
        [--vocab 49152] [--steps 2] [--episodes 32]

The quickstart's setting: its sandbox (``examples/quickstart-env``), a tokenizer trained on oracle
trajectories (2,048 ids), 8 tasks x 4 samples, 80 new tokens a turn, ``max_len`` 1536, and the
quickstart's model (``tiny:layers=2,hidden=128,heads=4,kv_heads=2``) or a SmolLM2-135M-shaped llama
built from its config (hidden 576, 9 heads, 3 kv heads, intermediate 1536, vocabulary 49,152; the
logits are cut to the tokenizer's ids after the full LM head). A randomly initialised model never
calls a tool, so each episode replays an oracle episode's observations after each sampled turn (as
user messages): the turns and observation lengths are those of real quickstart episodes, the
assistant turns are sampled (one id in 40 also ends a turn, so turns are ~40 tokens). Each step runs
the same episodes without the cache and with it (order alternating), checks that both sampled the
same ids (after one small untimed rollout each), and the table gives mean prompt and prefilled tokens per episode by turn and the rollout
seconds per step, with their ratios (measured in the same run: the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import time
from pathlib import Path
from typing import Any

import torch

from agentrl.env import ResearchEnv
from agentrl.rollout.episode import EpisodeSpec, episode_seed
from agentrl.sampling import generate
from agentrl.sampling.engines import EpisodeLoop, HFEngine
from agentrl.tokens import Expander, SamplingSpec
from agentrl.train.sft import collect_oracle_trajectories
from agentrl.train.tokenizer import train_chat_tokenizer
from agentrl.trajectory import Message, Trajectory

SUITE = str(Path(__file__).resolve().parents[2] / "examples" / "quickstart-env")


class ObservedEnv:
    """Replays ``oracle``'s observations after each sampled turn, for as many turns as it had."""

    def __init__(self, oracle: Trajectory) -> None:
        msgs = oracle.messages
        first = next(i for i, m in enumerate(msgs) if m.role == "assistant")
        self.head = msgs[:first]
        self.obs: list[list[Message]] = []
        for i in range(first, len(msgs)):
            if msgs[i].role == "assistant":
                self.obs.append([])
            else:
                self.obs[-1].append(Message(role="user", content=msgs[i].text))
        self.task_id = oracle.task_id

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[str, dict[str, Any]]:
        self.messages, self.k = list(self.head), 0
        return "", {}

    def step(self, msg: Message) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.messages += [msg, *self.obs[self.k]]
        self.k += 1
        return "", 0.0, self.k >= len(self.obs), False, {}

    def trajectory(self, id: str, *, stop_reason: str | None = None) -> Trajectory:
        return Trajectory(id=id, task_id=self.task_id, messages=self.messages, info={"stop": stop_reason})


class CutLogits(torch.nn.Module):
    """``model`` with its logits cut to the first ``n`` ids (a model vocabulary larger than the
    tokenizer's, so that the LM head costs what it would at full size)."""

    def __init__(self, model: torch.nn.Module, n: int) -> None:
        super().__init__()
        self.inner, self.n = model, n

    def forward(self, logits_to_keep: int = 0, **kw: Any) -> Any:
        out = self.inner(logits_to_keep=logits_to_keep, **kw)
        out.logits = out.logits[..., : self.n]
        return out


def _model(kind: str, layers: int, vocab: int, model_vocab: int = 49152) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "quickstart":
        from agentrl.learn.models import build_tiny_model

        return build_tiny_model(vocab, "tiny:layers=2,hidden=128,heads=4,kv_heads=2").eval()
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(
        vocab_size=model_vocab, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, tie_word_embeddings=True,
    )  # fmt: skip
    return CutLogits(AutoModelForCausalLM.from_config(cfg), vocab).eval()


PREFILL_S = [0.0]  # seconds in the prefill functions, the running total


def _timed(fn: Any) -> Any:
    def run(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            PREFILL_S[0] += time.perf_counter() - t0

    return run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["quickstart", "smollm2"], default="quickstart")
    ap.add_argument("--layers", type=int, default=30, help="smollm2: hidden layers (SmolLM2-135M has 30)")
    ap.add_argument(
        "--vocab", type=int, default=49152, help="smollm2: the model's vocabulary (SmolLM2's 49,152)"
    )
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=32, help="episodes per step (8 tasks x 4 samples)")
    args = ap.parse_args(argv)
    generate._prefill = _timed(generate._prefill)

    env_config = {"suite": SUITE, "budgets": {"max_turns": 4}}
    tasks = ResearchEnv(env_config).suite.tasks[:8]
    n_steps, n = args.steps, args.episodes
    oracle = collect_oracle_trajectories(env_config, tasks, 0.5, 0, episodes=n * n_steps)
    tok = train_chat_tokenizer([m.text for t in oracle for m in t.messages] * 2, 2048)
    model = _model(args.model, args.layers, len(tok), args.vocab)
    exp = Expander(tok, max_len=1536)
    stops = set(exp.stop_ids) | set(range(0, len(tok), 40))
    rows: dict[str, dict[str, dict[int, int]]] = {}
    secs: dict[str, float] = {"off": 0.0, "on": 0.0}
    cpu: dict[str, float] = {"off": 0.0, "on": 0.0}  # CPU seconds: steadier than wall on a shared machine
    pre: dict[str, float] = {"off": 0.0, "on": 0.0}
    same = True
    with cf.ThreadPoolExecutor(2) as pool:
        loop = EpisodeLoop(SamplingSpec(frozenset(stops), 1536, 80), exp, pool)
        engines = {
            "off": HFEngine(model, loop, pad_id=0),
            "on": HFEngine(model, loop, pad_id=0, kv_cache_tokens=65536),
        }
        warm = oracle[:2]  # one small untimed rollout each: first calls pay for kernel set-up
        for e in engines.values():
            e.rollout(
                [ObservedEnv(t) for t in warm],
                [EpisodeSpec(f"w{i}", t.task_id, i) for i, t in enumerate(warm)],
            )
        for s in range(n_steps):
            batch = oracle[s * n : (s + 1) * n]
            specs = [
                EpisodeSpec(f"{t.task_id}#{s}.{i}", t.task_id, episode_seed(s, t.task_id, i))
                for i, t in enumerate(batch)
            ]
            got = {}
            for mode in ("off", "on") if s % 2 == 0 else ("on", "off"):
                t0, c0, p0 = time.perf_counter(), time.process_time(), PREFILL_S[0]
                got[mode] = engines[mode].rollout([ObservedEnv(t) for t in batch], specs)
                secs[mode] += time.perf_counter() - t0
                cpu[mode] += time.process_time() - c0
                pre[mode] += PREFILL_S[0] - p0
                st = engines[mode].prefill
                acc = rows.setdefault(mode, {"prompt": {}, "prefilled": {}, "rows": {}})
                for key in ("prompt", "prefilled", "rows"):
                    for turn, v in getattr(st, key).items():
                        acc[key][turn] = acc[key].get(turn, 0) + v
            for a, b in zip(got["off"], got["on"], strict=True):
                ids = [[m.token_ids for m in t.messages if m.role == "assistant"] for t in (a, b)]
                same &= ids[0] == ids[1]
    name = (
        "quickstart tiny (2 layers)"
        if args.model == "quickstart"
        else f"SmolLM2-shaped ({args.layers} layers{'' if args.vocab == 49152 else f', vocabulary {args.vocab}'})"
    )
    print(f"{name}, {n} episodes x {n_steps} steps; sampled ids equal with and without the cache: {same}")
    print("| turn | episodes | prompt tokens | prefilled, no cache | prefilled, cache | ratio |")
    print("|---:|---:|---:|---:|---:|---:|")
    off, on = rows["off"], rows["on"]
    for turn in sorted(off["rows"]):
        k = off["rows"][turn]
        p, a, b = off["prompt"][turn] / k, off["prefilled"][turn] / k, on["prefilled"][turn] / k
        print(f"| {turn} | {k} | {p:.0f} | {a:.0f} | {b:.0f} | {b / a:.3f} |")
    tot_a, tot_b = sum(off["prefilled"].values()), sum(on["prefilled"].values())
    print(f"| all | | | {tot_a} | {tot_b} | {tot_b / tot_a:.3f} |")
    so, sn = secs["off"] / n_steps, secs["on"] / n_steps
    print(f"rollout seconds per step (wall): no cache {so:.2f}, cache {sn:.2f}, ratio {sn / so:.3f}")
    po, pn = pre["off"] / n_steps, pre["on"] / n_steps
    print(f"prefill seconds per step (wall): no cache {po:.2f}, cache {pn:.2f}, ratio {pn / po:.3f}")
    co, cn = cpu["off"] / n_steps, cpu["on"] / n_steps
    print(f"rollout CPU seconds per step: no cache {co:.2f}, cache {cn:.2f}, ratio {cn / co:.3f}")


if __name__ == "__main__":
    main()
