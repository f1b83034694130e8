"""``agentrl judge TRAJ.jsonl --rubric R.yaml``: fill in every trajectory's reward and print a summary.

Judge failures are counted and shown; the command exits non-zero for usage errors (missing files,
bad rubric, LLM criteria without a judge model) and when every trajectory it had to judge is a
judge error (a server that is down, a model it does not serve), after writing what it has.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from agentrl.cli.args import OneLineParser, float_range, int_range

__all__ = ["add_response_format", "default_cache_path", "one_line", "register"]


def default_cache_path() -> Path:
    """The verdict cache of ``agentrl judge``, ``rollout`` and ``replay``: ``$AGENTRL_CACHE/judge.sqlite``
    (``~/.cache/agentrl/judge.sqlite`` by default; ``agentrl.cachedir`` owns the root)."""
    from agentrl.cachedir import judge_cache_path

    return judge_cache_path()


class _JudgeParser(OneLineParser):
    """``agentrl judge``'s parser: ``agentrl judge agreement ...`` goes to the agreement parser,
    anything else is ``agentrl judge TRAJ.jsonl ...`` (argparse cannot give a command both a
    positional path and sub-commands; a file named ``agreement`` is written ``./agreement``)."""

    agreement: argparse.ArgumentParser

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        if args and args[0] == "agreement":
            return self.agreement.parse_known_args(args[1:], namespace)
        return super().parse_known_args(args, namespace)


def _judge_options(p: argparse.ArgumentParser) -> None:
    """The options that say which judge to call and how (shared by ``judge`` and ``judge agreement``)."""
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
    p.add_argument(
        "--concurrency", type=int_range(1), default=16, metavar="N", help="judge calls in flight (16)"
    )
    p.add_argument(
        "--criteria-per-call", type=int_range(0), default=0, metavar="K", help="0 = all criteria in one call"
    )
    p.add_argument(
        "--timeout",
        type=float_range(0, lo_open=True),
        default=120.0,
        metavar="S",
        help="per-call timeout in seconds",
    )
    p.add_argument(
        "--max-retries", type=int_range(0), default=4, metavar="N", help="retries on 429/5xx/timeouts"
    )
    p.add_argument(
        "--no-sources", action="store_true", help="do not show the judge the pages the agent opened"
    )
    add_response_format(p)


def add_response_format(
    p: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str = "--response-format"
) -> None:
    """The option that says how the judge asks for its reply's JSON schema (also on ``agentrl replay``)."""
    p.add_argument(
        flag,
        choices=("auto", "json_schema", "json_object", "none"),
        default="auto",
        help="how to ask the server for the verdicts' JSON schema: auto (json_schema, then json_object "
        "with the schema, then json_object, then none, as the server accepts; the default), or one of them",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``judge`` command and its ``judge agreement`` form."""
    p = subparsers.add_parser(
        "judge",
        help="score stored trajectories against a rubric (LLM judge and deterministic graders)",
        description="Score trajectories against a rubric and write them with `reward` filled in.",
        epilog="agentrl judge agreement TRAJ.jsonl --samples N [--labels FILE]: how often repeated "
        "judge samples flip each verdict, and agreement with labelled verdicts "
        "(agentrl judge agreement --help).",
    )
    p.__class__ = _JudgeParser  # add_parser builds the class its action was given; this one delegates
    p.add_argument("trajectories", metavar="TRAJ.jsonl", help="trajectories to score")
    _judge_options(p)
    p.add_argument("--out", metavar="OUT.jsonl", help="where to write (default: TRAJ.judged.jsonl)")
    p.add_argument(
        "--samples",
        type=int_range(1),
        default=1,
        metavar="N",
        help="judge calls per criterion, majority vote",
    )
    p.add_argument(
        "--cache",
        metavar="PATH",
        help="verdict cache (default: $AGENTRL_CACHE/judge.sqlite, ~/.cache/agentrl)",
    )
    p.add_argument("--no-cache", action="store_true", help="do not read or write the verdict cache")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(
        handler=_run, setting_flags={"JudgeConfig(model=...)": "--model", "rubric=...": "--rubric"}
    )

    a = OneLineParser(
        prog=f"{p.prog} agreement",
        description="Judge each trajectory N times (verdict cache off) and report, per criterion, how "
        "often the verdict flips under each mapping (strict, ternary, binary), the most stable "
        "mapping, and with --labels the judge's accuracy and Cohen's kappa against labelled verdicts.",
    )
    a.add_argument("trajectories", metavar="TRAJ.jsonl", help="trajectories to judge (unique ids)")
    a.add_argument(
        "--samples", type=int_range(2), default=5, metavar="N", help="judge calls per trajectory (>= 2; 5)"
    )
    a.add_argument(
        "--labels",
        metavar="FILE",
        help='labelled verdicts, JSONL: {"trajectory_id", "criterion_id", "verdict"} a line',
    )
    a.add_argument(
        "--temperature", type=float_range(0), default=None, metavar="T", help="judge sampling temperature (0)"
    )
    _judge_options(a)
    a.add_argument("--json", action="store_true", help="print the report as JSON")
    a.set_defaults(
        handler=_agreement, setting_flags={"JudgeConfig(model=...)": "--model", "rubric=...": "--rubric"}
    )
    p.agreement = a


def _config(args: argparse.Namespace, **fields):
    """The ``JudgeConfig`` of the command line; a bad value is a ``ConfigError`` naming its option."""
    from pydantic import ValidationError

    from agentrl.credentials import explicit_key
    from agentrl.errors import ConfigError
    from agentrl.judge import JudgeConfig

    try:
        return JudgeConfig(
            model=args.model,
            api_base=args.api_base,
            api_key=explicit_key(None, args.api_key_env) or os.environ.get("AGENTRL_JUDGE_API_KEY"),
            concurrency=args.concurrency,
            criteria_per_call=args.criteria_per_call,
            timeout_s=args.timeout,
            max_retries=args.max_retries,
            include_sources=not args.no_sources,
            response_format=args.response_format,
            **fields,
        )
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}") from None


def _run(args: argparse.Namespace) -> int:
    from agentrl.jsonl import dumps, input_file
    from agentrl.judge import load_rubric, score_trajectories, summarize
    from agentrl.outputs import check_output_file, naming
    from agentrl.trajectory import read_trajectories, write_trajectories

    src = input_file(args.trajectories)
    out = Path(args.out) if args.out else src.with_name(src.name.removesuffix(".jsonl") + ".judged.jsonl")
    check_output_file(out, flag="--out" if args.out else "output")
    if args.cache and not args.no_cache:
        check_output_file(args.cache, flag="--cache")
    rubric = load_rubric(args.rubric) if args.rubric else None
    config = _config(
        args,
        samples=args.samples,
        cache_path=None if args.no_cache else str(args.cache or default_cache_path()),
    )
    trajectories = list(read_trajectories(src))
    if not trajectories:
        from agentrl.errors import ConfigError

        raise ConfigError(f"{src}: holds no trajectories: nothing to judge")
    from agentrl.train.progress import make_progress

    progress = make_progress(live=True)  # a bar on a terminal; lines in a log (every tenth, every 30 s)
    try:
        with progress.counted("judge") as count:
            count.total(len(trajectories))
            judged = score_trajectories(trajectories, rubric, config, on_done=lambda _: count.advance())
    finally:
        progress.close()
    with naming(out):
        write_trajectories(out, judged)
    s = summarize(t.reward for t in judged)
    # Failed for good: judge errors and not one trajectory judged without an error (an unanswered
    # episode, scored 0 with no call, does not count as judged).
    failed = s.judge_errors > 0 and not any(
        t.reward is not None and t.reward.total is not None and t.reward.error is None for t in judged
    )
    if args.json:
        print(dumps({"out": str(out), **s.model_dump()}, indent=2))
        return _all_failed(s) if failed else 0
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
        print(f"first judge error: {one_line(s.first_error)}")
    return _all_failed(s) if failed else 0


def one_line(text: str, limit: int = 400) -> str:
    """``text`` with its whitespace runs (newlines included) made single spaces, cut to ``limit``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _all_failed(s) -> int:
    import sys

    first = f": {one_line(s.first_error)}" if s.first_error else ""
    print(
        f"agentrl judge: error: all {s.judge_errors} judged trajectories are judge errors{first}",
        file=sys.stderr,
    )
    return 1


def _agreement(args: argparse.Namespace) -> int:
    from agentrl.jsonl import dumps, input_file
    from agentrl.judge import load_rubric
    from agentrl.judge.agreement import measure_agreement, read_labels
    from agentrl.trajectory import read_trajectories

    src = input_file(args.trajectories)
    rubric = load_rubric(args.rubric) if args.rubric else None
    labels = read_labels(args.labels) if args.labels else None
    extra = {} if args.temperature is None else {"temperature": args.temperature}
    config = _config(args, **extra)
    report = measure_agreement(
        list(read_trajectories(src)), rubric, config, samples=args.samples, labels=labels
    )
    # Nothing judged: no trajectory with a report, or every sample a judge error (a flip rate of 0
    # over no verdicts would read as a perfectly stable judge).
    runs = (report.trajectories - report.unanswered) * report.samples
    failed = runs == 0 or report.judge_errors >= runs
    if args.json:
        print(dumps(report.model_dump(), indent=2))
    else:
        _print_agreement(report, model=config.model, temperature=config.temperature)
    if not failed:
        return 0
    import sys

    why = (
        "no trajectory has a report: nothing to judge"
        if runs == 0
        else f"all {report.judge_errors} judge runs are judge errors: no verdict to compare"
    )
    print(f"agentrl judge agreement: error: {why}", file=sys.stderr)
    return 1


def _fmt(x: float | None) -> str:
    return "  n/a" if x is None else f"{x:5.3f}"


def _print_agreement(report, *, model: str | None, temperature: float) -> None:
    r = report
    print(
        f"{r.trajectories} trajectories x {r.samples} samples (model {model}, temperature {temperature:g}); "
        f"judge errors {r.judge_errors}, unanswered {r.unanswered}"
    )
    print(
        f"{'criterion':<20} {'grader':<8} {'unstable':>8}  {'flip rate: strict':>17} {'ternary':>8} {'binary':>8}"
    )
    for c in r.criteria:
        flips = [_fmt(c.mappings[m].flip_rate) for m in ("strict", "ternary", "binary")]
        unstable = f"{c.unstable}/{c.trajectories}"
        print(f"{c.id:<20} {c.grader:<8} {unstable:>8}  {flips[0]:>17} {flips[1]:>8} {flips[2]:>8}")
    overall = ", ".join(f"{k} {_fmt(v).strip()}" for k, v in r.flip_rate.items())
    best = ", ".join(r.most_stable) if r.most_stable else "all equally stable"
    print(f"flip rate over the LLM criteria: {overall}; most stable mapping: {best}")
    if not r.labels:
        return
    print(f"labels: {r.labels} ({r.labels_unmatched} without a judged verdict); accuracy / Cohen's kappa:")
    print(f"{'criterion':<20} {'labelled':>8}  {'strict':>13}  {'ternary':>13}  {'binary':>13}")
    for c in r.criteria:
        if c.labelled:
            cells = [
                f"{_fmt(c.mappings[m].accuracy)} / {_fmt(c.mappings[m].kappa)}"
                for m in ("strict", "ternary", "binary")
            ]
            print(f"{c.id:<20} {c.labelled:>8}  {cells[0]:>13}  {cells[1]:>13}  {cells[2]:>13}")
