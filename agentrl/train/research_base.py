"""The research base's recipe: a small causal LM pretrained on worlds no example names.

``python -m agentrl.train.research_base --out DIR`` writes a transformers directory (weights,
config, tokenizer) and ``card.json``, its model card: the data seeds, the steps, the losses, the
held-out copy accuracy, the wall time, the CPU and the weights' sha256. The recipe's defaults made
the base agentrl ships, ``base:research-tiny`` (``agentrl.learn.bases``; the test suite checks its
weights against its card and reruns the card's first steps): a 2-layer model with a copy head
(``agentrl.learn.copy_lm``; without one, four attempts of up to 1,000 steps researched held-out
companies up to the figure and then wrote a wrong one, BENCHMARKS.md "A research base") and copy
drills (``agentrl.train.copying``) in every step. ``model.path: DIR`` trains a base, ``--policy
hf:DIR`` samples it.

What it learns from: oracle episodes (``agentrl.policy.OraclePolicy`` with distractor noise, so
choosing the official source is left for RL to learn) on ``Recipe.worlds`` generated sandbox worlds
of ``Recipe.companies`` companies each. Their names are drawn from the sandbox's own pieces
(``agentrl.env.sandbox.world``) but never one of ``example_stems()``, the companies of every world
the examples and suites build, training or held out; with 1,800 companies over 5,000 stems, no name
is seen often enough to be recalled rather than copied from the question and the pages. (A first
attempt drew random-syllable names, a scheme that shares nothing with the sandbox's: the model
learned to copy those, 0.96 of its next tokens right on a held-out syllable world, but misspelt
sandbox names, 0.91, and every held-out episode failed on the name.) The tokenizer is trained on
the first worlds' episodes (``agentrl.train.tokenizer``), never on an example's. The env is the
quickstart suite's (``ENV``: its prompt, tool format, page size and budgets). A plain model is
saved as a Llama-architecture directory (``export_llama``: see there why), a copy head as its own
model type.

Deterministic for a thread count: the worlds, the episodes, the batches and the initial weights
come from ``seed``; the test suite runs the first steps and compares them with the card's.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.learn.models import build_tiny_model
from agentrl.rundir import file_digest
from agentrl.train.copying import copy_accuracy, copy_drills
from agentrl.trajectory import Trajectory

__all__ = [
    "ENV",
    "Recipe",
    "Worlds",
    "cpu_name",
    "export_llama",
    "pretrain",
    "save_base",
    "world_episodes",
]

#: The env the base learns in: the quickstart suite's settings (a test checks they agree).
ENV: dict[str, Any] = {
    "search": {"backend": "sandbox"},
    "fetch": {"backend": "sandbox"},
    "tool_format": "hermes",
    "search_k": 4,
    "page_chars": 300,
    "budgets": {"max_turns": 4, "max_tool_calls": 6, "max_obs_chars": 1500},
    "system_prompt": 'Today is {date}. Call tools as <tool_call>{"name": ..., "arguments": ...}</tool_call>: '
    "search(query), open_url(url), answer(report). Prefer official sources and cite them as \\cite{id}.",
}


@dataclass
class Recipe:
    """The recipe's settings (``card.json`` records every one)."""

    seed: int = 0
    worlds: int = 300
    companies: int = 6
    names: str = "sandbox"  # drawn from the sandbox's pieces, never an example's
    noise: float = 0.5
    samples: int = 2  # oracle episodes per task (each draws its noise)
    drills: int = 8  # copy drills added to each step's batch (agentrl.train.copying), from its worlds
    model: str = "tiny:layers=2,hidden=128,heads=4,kv_heads=2,copy=64"  # with a copy head (learn.copy_lm)
    vocab: int = 2048
    decimal_tokens: bool = False  # ".0" one token (agentrl.train.tokenizer.train_chat_tokenizer)
    steps: int = 300
    batch: int = 16
    batch_worlds: int = 4  # worlds each step's batch is drawn from
    tokenizer_worlds: int = 8  # the first worlds train the tokenizer
    lr: float = 3e-3
    warmup: int = 50
    max_len: int = 1536
    micro_batch_tokens: int = 16384

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: The worlds the repository's examples and suites build, as (seed, companies incl. held-out): the
#: default sandbox (seed 0, 50 companies) holds the quickstart's and the long-horizon suite's six.
#: The base's data names none of their companies; a test reads every ``sandbox.yaml`` against it.
EXAMPLE_WORLDS = ((0, 50),)


def example_stems() -> frozenset[str]:
    """The company stems of ``EXAMPLE_WORLDS`` (``Ostionline`` of ``Ostionline Networks``)."""
    from agentrl.env.sandbox import excluded_stems

    return excluded_stems(EXAMPLE_WORLDS)


def world_episodes(
    seed: int,
    companies: int,
    noise: float,
    samples: int,
    names: str = "sandbox",
    exclude: frozenset[str] = frozenset(),
) -> list[Trajectory]:
    """The oracle's episodes (``samples`` per task, chat mode) in a world built from ``seed`` with the
    name scheme ``names``, drawing no stem of ``exclude``."""
    from agentrl.env.sandbox import build
    from agentrl.env.suite import load_suite, unload_suite
    from agentrl.train.sft import collect_oracle_trajectories

    with tempfile.TemporaryDirectory(prefix="agentrl-base-") as tmp:
        build(tmp, seed=seed, companies=companies, names=names, exclude=exclude)
        suite = load_suite(tmp)
        tasks = suite.tasks
        env = {**json.loads(json.dumps(ENV)), "suite": tmp}
        out = collect_oracle_trajectories(env, tasks, noise, seed, episodes=len(tasks) * samples)
        unload_suite(tmp)
    return out


class Worlds:
    """The recipe's worlds, each built (and its oracle episodes played) the first time it is drawn:
    world ``i`` is built from seed ``r.seed * 100_000 + i``."""

    def __init__(self, r: Recipe) -> None:
        self.r = r
        self._episodes: dict[int, list[Trajectory]] = {}
        self._drills: dict[int, list[Trajectory]] = {}
        self.exclude = example_stems()

    def seed(self, i: int) -> int:
        """The seed of world ``i``: its build, its oracle episodes and its drills' order."""
        return self.r.seed * 100_000 + i

    def episodes(self, i: int) -> list[Trajectory]:
        if i not in self._episodes:
            r = self.r
            self._episodes[i] = world_episodes(
                self.seed(i), r.companies, r.noise, r.samples, r.names, self.exclude
            )
        return self._episodes[i]

    def drills(self, i: int) -> list[Trajectory]:
        """World ``i``'s copy drills: one per episode that opened a page stating figures (their order
        drawn from the world's seed)."""
        if i not in self._drills:
            self._drills[i] = copy_drills(self.episodes(i), random.Random(self.seed(i)))
        return self._drills[i]

    def batch(self, rng: random.Random) -> list[Trajectory]:
        """One step's episodes: ``r.batch_worlds`` worlds drawn by ``rng``, then ``r.batch //
        r.batch_worlds`` episodes of each, and ``r.drills // r.batch_worlds`` of its copy drills."""
        r, picked = self.r, []
        for _ in range(r.batch_worlds):
            i = rng.randrange(r.worlds)
            eps = self.episodes(i)
            picked.extend(eps[rng.randrange(len(eps))] for _ in range(r.batch // r.batch_worlds))
            if r.drills and (drills := self.drills(i)):
                picked.extend(drills[rng.randrange(len(drills))] for _ in range(r.drills // r.batch_worlds))
        return picked

    @property
    def built(self) -> int:
        return len(self._episodes)


def pretrain(
    r: Recipe,
    out: Path | None,
    *,
    threads: int = 2,
    stop_after: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the recipe; with ``out``, save the model, tokenizer and ``card.json`` there. Returns the
    card. ``stop_after``: only that many steps (the test's reproduction of the first losses)."""
    from agentrl.tokens import sampling_spec
    from agentrl.train.sft import sft_update
    from agentrl.train.tokenizer import train_chat_tokenizer

    torch.set_num_threads(threads)
    torch.manual_seed(r.seed)
    t0 = time.perf_counter()
    worlds = Worlds(r)
    texts = [m.text for i in range(r.tokenizer_worlds) for t in worlds.episodes(i) for m in t.messages]
    tokenizer = train_chat_tokenizer(texts, r.vocab, decimal_tokens=r.decimal_tokens)
    spec = sampling_spec(tokenizer, max_len=r.max_len, max_new_tokens=80)
    expander = spec.expander(tokenizer)
    pad_id = tokenizer.pad_token_id
    model = build_tiny_model(len(tokenizer), r.model, seed=r.seed)
    opt = torch.optim.AdamW(list(model.parameters()), lr=r.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: _lr_factor(r, step))
    rng = random.Random(r.seed)
    losses: list[float] = []
    steps = min(r.steps, stop_after) if stop_after is not None else r.steps
    log(f"tokenizer on {r.tokenizer_worlds} worlds ({time.perf_counter() - t0:.0f} s); {steps} steps")
    for k in range(1, steps + 1):
        picked = worlds.batch(rng)
        loss = sft_update(
            model, opt, expander, picked, pad_id=pad_id, micro_batch_tokens=r.micro_batch_tokens
        )
        sched.step()
        losses.append(round(loss, 6))
        if k % 50 == 0 or k == steps:
            log(
                f"step {k}/{steps}: loss {loss:.4f}, {worlds.built} worlds built ({time.perf_counter() - t0:.0f} s)"
            )
    card: dict[str, Any] = {
        "recipe": r.to_json(),
        "worlds_built": worlds.built,
        "threads": threads,
        "first_losses": losses[:5],
        "losses_every_50": [losses[i] for i in range(49, len(losses), 50)],
        "final_loss": losses[-1] if losses else None,
        "steps_run": steps,
    }
    if stop_after is not None:
        return card
    card["wall_s"] = round(time.perf_counter() - t0, 1)
    card["cpu"] = cpu_name()
    card["torch"] = torch.__version__
    card["kernels"] = torch.backends.cpu.get_cpu_capability()
    if out is not None:
        save_base(model, tokenizer, card, out)
    return card


def export_llama(model: torch.nn.Module) -> torch.nn.Module:
    """The trained Qwen2-architecture model as a Llama-architecture one with the same function: the
    same weights, ``attention_bias`` for Qwen2's q/k/v biases and a zero bias on ``o_proj``.

    Why: transformers' ``AutoTokenizer`` gives every ``qwen2`` directory Qwen2's own tokenizer class,
    which replaces the saved pre-tokenizer with Qwen2's (digits one by one), so the base's tokenizer
    read back split ``2024`` into four tokens it never trained on, and the model answered nonsense. A
    ``llama`` directory loads the tokenizer that was saved."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = model.config
    config = LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, max_position_embeddings=c.max_position_embeddings,
        rms_norm_eps=c.rms_norm_eps, rope_parameters=c.rope_parameters, hidden_act=c.hidden_act,
        tie_word_embeddings=c.tie_word_embeddings, attention_bias=True,
        bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id,
    )  # fmt: skip
    llama = LlamaForCausalLM(config)
    missing, unexpected = llama.load_state_dict(model.state_dict(), strict=False)
    if unexpected or any(not k.endswith("o_proj.bias") for k in missing):
        raise RuntimeError(f"not a Qwen2 model llama can hold: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for name, p in llama.named_parameters():
            if name.endswith("o_proj.bias"):
                p.zero_()
    return llama.eval()


def save_base(model: torch.nn.Module, tokenizer: Any, card: dict[str, Any], out: Path) -> dict[str, Any]:
    """Write the base into ``out``: the model (``export_llama``), its tokenizer and ``card.json``, whose
    copy accuracies are measured on the files written, read back as a user reads them
    (``AutoModelForCausalLM``, ``AutoTokenizer``): on noise-free oracle episodes of the quickstart's
    six sandbox companies (which the data never names) and of a world of syllable names (a kind of
    name it never saw). Returns the card."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.learn.models import copy_head_of, register_model_types
    from agentrl.tokens import sampling_spec

    out.mkdir(parents=True, exist_ok=True)
    # A copy head is saved as its own model type (its tokenizer is not replaced as a qwen2 one's is).
    (model if copy_head_of(model) else export_llama(model)).save_pretrained(out, safe_serialization=True)
    register_model_types()
    tokenizer.save_pretrained(out)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    expander = sampling_spec(tokenizer, max_len=card["recipe"]["max_len"], max_new_tokens=80).expander(
        tokenizer
    )
    seed = card["recipe"]["seed"]
    heldout = world_episodes(0, 6, 0.0, 1)  # the quickstart's six companies: never in the data
    card["heldout_copy"] = copy_accuracy(model, expander, heldout, tokenizer)
    other = world_episodes(seed * 100_000 + 99_999, 3, 0.0, 1, names="syllables")  # names of another kind
    card["syllable_copy"] = copy_accuracy(model, expander, other, tokenizer)
    card["sha256"] = {"model.safetensors": file_digest(out / "model.safetensors")[1]}
    (out / "card.json").write_text(json.dumps(card, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return card


def _lr_factor(r: Recipe, step: int) -> float:
    """The learning-rate multiplier of ``step``: linear warm-up, then a cosine down to a tenth."""
    if step < r.warmup:
        return (step + 1) / r.warmup
    frac = (step - r.warmup) / max(r.steps - r.warmup, 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says: what a card or a
    benchmark records beside a time."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m agentrl.train.research_base", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--out", type=Path, required=True, help="the directory the base is written to")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the losses depend on it)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a recipe setting")
    args = ap.parse_args(argv)
    kw: dict[str, Any] = {}
    defaults = Recipe().to_json()
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in defaults:
            ap.error(f"--set {item}: no recipe setting {key!r} (settings: {', '.join(defaults)})")
        if isinstance(defaults[key], bool):
            if value.lower() not in ("true", "false"):
                ap.error(f"--set {item}: {key} is true or false")
            kw[key] = value.lower() == "true"
        else:
            kw[key] = type(defaults[key])(value)
    pretrain(Recipe(**kw), args.out, threads=args.threads)


if __name__ == "__main__":
    main()
