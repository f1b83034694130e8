"""``agentrl judge TRAJ.jsonl --rubric R.yaml``: fill in every trajectory's reward and print a summary.

Judge failures are counted and shown, not fatal: the command exits non-zero only for usage
errors (missing files, bad rubric, LLM criteria without a judge model).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

__all__ = ["default_cache_path", "register"]


def default_cache_path() -> Path:
    """``$AGENTRL_CACHE_DIR/judge.sqlite``, else ``$XDG_CACHE_HOME/agentrl/judge.sqlite`` (``~/.cache``)."""
    base = os.environ.get("AGENTRL_CACHE_DIR")
    if base:
        return Path(base) / "judge.sqlite"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "agentrl" / "judge.sqlite"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``judge`` command."""
    p = subparsers.add_parser(
        "judge",
        help="score stored trajectories against a rubric (LLM judge and deterministic graders)",
        description="Score trajectories against a rubric and write them with `reward` filled in.",
    )
    p.add_argument("trajectories", metavar="TRAJ.jsonl", help="trajectories to score")
    p.add_argument(
        "--rubric", metavar="R.yaml", help="rubric for every trajectory (default: each one's info.rubric)"
    )
    p.add_argument(
        "--model", default=os.environ.get("AGENTRL_JUDGE_MODEL"), help="litellm model of the judge"
    )
    p.add_argument(
        "--api-base",
        default=os.environ.get("AGENTRL_JUDGE_API_BASE"),
        metavar="URL",
        help="OpenAI-compatible server (vLLM, llama.cpp, Ollama), e.g. http://127.0.0.1:8000/v1",
    )
    p.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="read the judge server's API key from $NAME (default: $AGENTRL_JUDGE_API_KEY; "
        "$OPENAI_API_KEY goes to https://api.openai.com only)",
    )
    p.add_argument("--concurrency", type=int, default=16, metavar="N", help="judge calls in flight (16)")
    p.add_argument("--out", metavar="OUT.jsonl", help="where to write (default: TRAJ.judged.jsonl)")
    p.add_argument(
        "--criteria-per-call", type=int, default=0, metavar="K", help="0 = all criteria in one call"
    )
    p.add_argument(
        "--samples", type=int, default=1, metavar="N", help="judge calls per criterion, majority vote"
    )
    p.add_argument("--timeout", type=float, default=120.0, metavar="S", help="per-call timeout in seconds")
    p.add_argument("--max-retries", type=int, default=4, metavar="N", help="retries on 429/5xx/timeouts")
    p.add_argument(
        "--no-sources", action="store_true", help="do not show the judge the pages the agent opened"
    )
    p.add_argument("--cache", metavar="PATH", help=f"verdict cache (default: {default_cache_path()})")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the verdict cache")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import json

    from pydantic import ValidationError

    from agentrl.credentials import explicit_key
    from agentrl.errors import ConfigError
    from agentrl.judge import JudgeConfig, load_rubric, score_trajectories, summarize
    from agentrl.trajectory import read_trajectories, write_trajectories

    src = Path(args.trajectories)
    if not src.is_file():
        raise ConfigError(f"{src}: no such trajectory file")
    out = Path(args.out) if args.out else src.with_name(src.name.removesuffix(".jsonl") + ".judged.jsonl")
    rubric = load_rubric(args.rubric) if args.rubric else None
    try:
        config = JudgeConfig(
            model=args.model,
            api_base=args.api_base,
            api_key=explicit_key(None, args.api_key_env) or os.environ.get("AGENTRL_JUDGE_API_KEY"),
            concurrency=args.concurrency,
            criteria_per_call=args.criteria_per_call,
            samples=args.samples,
            timeout_s=args.timeout,
            max_retries=args.max_retries,
            include_sources=not args.no_sources,
            cache_path=None if args.no_cache else str(args.cache or default_cache_path()),
        )
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}") from None
    trajectories = list(read_trajectories(src))
    judged = score_trajectories(trajectories, rubric, config)
    write_trajectories(out, judged)
    s = summarize(t.reward for t in judged)
    if args.json:
        print(json.dumps({"out": str(out), **s.model_dump()}, indent=2))
        return 0
    mean = "n/a" if s.mean_reward is None else f"{s.mean_reward:.4f}"
    print(f"wrote {len(judged)} trajectories to {out}")
    print(f"mean reward {mean} over {s.scored} scored; judge errors {s.judge_errors}")
    for cid, rate in s.pass_rate.items():
        print(
            f"  {cid:<24} fully satisfied {rate:6.1%}"
            + ("  (negative: the flaw was present)" if cid in s.negative else "")
        )
    print(
        f"calls {s.calls}, cache hits {s.cache_hits}, tokens {s.prompt_tokens} in / {s.completion_tokens} out, "
        f"cost ${s.cost_usd:.4f}"
    )
    if s.first_error:
        print(f"first judge error: {s.first_error}")
    return 0
