"""Recall or copy, teacher-forced: for trained runs, the share of the policy's tokens that are the
model's most likely next token on noise-free oracle episodes of the suite's held-out companies and of
its training companies (``agentrl.train.copying.copy_accuracy``: every token, the answers' figure
tokens, each figure's first token), and the held-out tokens the model gets wrong, shown in one
episode. BENCHMARKS.md's copy-head table.

    python -m tests.bench.copying runs/a runs/b [--suite DIR] [--show 1]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

__all__ = ["accuracies", "main", "marked"]


def _episodes(suite_dir: str, split: str | None, n: int, env: dict[str, Any]) -> list[Any]:
    from agentrl.env.suite import load_suite
    from agentrl.train.sft import collect_oracle_trajectories

    suite = load_suite(suite_dir)
    tasks = [t for t in suite.tasks if (t.split == "heldout") == (split == "heldout")][:n]
    return collect_oracle_trajectories({**env, "suite": suite_dir}, tasks, 0.0, 0)


def _run(run: Path) -> tuple[Any, Any, Any, dict[str, Any]]:
    """The run's latest model, tokenizer, expander (its recorded spec) and env config."""
    from agentrl.learn.policy_model import load_policy_model
    from agentrl.tokens import read_sampling_spec

    policy = load_policy_model(run, device="cpu")
    spec = read_sampling_spec(run / "sampling.json")
    if spec is None:
        raise SystemExit(f"{run}: no sampling.json (not an agentrl train run)")
    cfg = json.loads((run / "config.json").read_text(encoding="utf-8"))
    return policy.model, policy.tokenizer, spec.expander(policy.tokenizer), dict(cfg["rollout"]["env"] or {})


def _suite(run: Path) -> str:
    return str(json.loads((run / "config.json").read_text(encoding="utf-8"))["rollout"]["suite"])


def accuracies(run: Path, suite_dir: str, tasks: int = 33) -> dict[str, dict[str, float]]:
    """{"heldout": ..., "training": ...}: ``copy_accuracy`` of ``run``'s model on the first ``tasks``
    tasks of each, played by the noise-free oracle in the run's env."""
    from agentrl.train.copying import copy_accuracy

    model, tok, exp, env = _run(run)
    return {
        split: copy_accuracy(model, exp, _episodes(suite_dir, split, tasks, env), tok)
        for split in ("heldout", "training")
    }


@torch.no_grad()
def marked(run: Path, suite_dir: str, index: int = 0) -> str:
    """The policy tokens of held-out oracle episode ``index``, each one the model would not pick
    shown as ``[token|its pick p(token)]``."""
    from agentrl.tokens import collate
    from agentrl.train.sft import sft_rows

    model, tok, exp, env = _run(run)
    ep = _episodes(suite_dir, "heldout", index + 1, env)[index]
    b = collate(sft_rows(exp, [ep]), pad_token_id=tok.pad_token_id)
    probs = model.eval()(input_ids=b["input_ids"]).logits[0].softmax(-1)
    ids, mask, out = b["input_ids"][0].tolist(), b["loss_mask"][0].tolist(), []
    for t in range(1, len(ids)):
        if mask[t]:
            s, pick = tok.decode([ids[t]]), int(probs[t - 1].argmax())
            out.append(s if pick == ids[t] else f"[{s}|{tok.decode([pick])} {probs[t - 1, ids[t]]:.2f}]")
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="agentrl train output directories")
    ap.add_argument("--suite", default=None, help="the suite (default: the one each run trained on)")
    ap.add_argument("--tasks", type=int, default=33, help="tasks of each split (default 33)")
    ap.add_argument("--show", type=int, default=None, help="also mark the errors of this held-out episode")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print("| run | split | every token | figure tokens | first figure token |")
    print("|---|---|---|---|---|")
    for run in args.runs:
        for split, acc in accuracies(run, args.suite or _suite(run), args.tasks).items():
            print(
                f"| {run.name} | {split} | {acc['tokens']:.3f} | {acc['figures']:.3f} | {acc['first_figure']:.3f} |"
            )
    if args.show is not None:
        for run in args.runs:
            text = marked(run, args.suite or _suite(run), args.show)
            print(f"\n{run.name}, held-out episode {args.show}:\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
