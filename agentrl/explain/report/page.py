"""The report page: one self-contained HTML file (inline CSS, inline SVG charts, a small inline
script) that opens from ``file://`` with no network.

A Content-Security-Policy allows no source at all except the page's own style and script, named
by their SHA-256: even if some text slipped through unescaped, no other script could run and
nothing could be fetched.
"""

from __future__ import annotations

import base64
import hashlib
import math
from datetime import UTC, datetime
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from agentrl.explain.report.charts import line_chart
from agentrl.explain.report.metrics import label as metric_label
from agentrl.explain.report.metrics import moved_steps, no_signal_steps
from agentrl.explain.report.research import research_section
from agentrl.explain.report.run import RunData, parse_steps, sample_trajectories
from agentrl.explain.report.tables import table as _table
from agentrl.explain.report.tokens import TokenRow, TokenSource
from agentrl.explain.report.trajectories import BUCKETS, advantage_scale, bucket_class, render_trajectory
from agentrl.trajectory import Trajectory, read_trajectories

__all__ = ["CHART_GROUPS", "render_report"]

#: The metric charts, in page order: (title, metric names, y-axis label). Absent metrics are skipped.
CHART_GROUPS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("Reward", ("critic/score/normalized_mean", "critic/score/mean"), "reward"),
    (
        "Evaluation (95% interval over tasks)",
        ("val/reward/mean", "val/reward/ci_low", "val/reward/ci_high", "critic/score/normalized_mean"),
        "normalised reward",
    ),
    (
        "Audit judge",
        ("audit/train_mean", "audit/audit_mean", "val-audit/train_mean", "val-audit/audit_mean"),
        "normalised reward",
    ),
    ("Judge agreement", ("audit/flip_rate", "audit/kappa", "val-audit/flip_rate", "val-audit/kappa"), ""),
    ("Losses", ("actor/pg_loss", "critic/vf_loss", "actor/kl_loss"), "loss"),
    ("Policy", ("actor/entropy", "actor/ppo_kl", "actor/pg_clipfrac", "actor/kl"), ""),
    ("Gradient norms", ("actor/grad_norm", "critic/grad_norm"), ""),
    ("Advantages", ("critic/advantages/mean", "critic/advantages/max", "critic/advantages/min"), ""),
    ("Critic", ("critic/vf_explained_var", "critic/vf_clipfrac", "critic/values/mean"), ""),
    ("Lengths (tokens)", ("response_length/mean", "prompt_length/mean"), "tokens"),
    ("Episodes", ("env/num_turns/mean", "env/tool_calls/mean", "env/format_errors/mean"), "per episode"),
    ("Answered", ("env/answered/frac",), "fraction"),
    ("Dropped trajectories", ("train/dropped_judge_error", "train/dropped_untrainable"), "count"),
    (
        "Time per phase",
        ("timing_s/step", "timing_s/rollout", "timing_s/judge", "timing_s/update", "timing_s/adv"),
        "seconds",
    ),
)


def _asset(name: str) -> str:
    return resources.files("agentrl.explain.report").joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def _series(rows: list[dict[str, Any]], key: str, x_key: str = "step") -> tuple[list[float], list[Any]]:
    xs, ys = [], []
    for r in rows:
        if x_key in r and key in r:
            xs.append(float(r[x_key]))
            ys.append(r[key] if isinstance(r[key], int | float) else None)
    return xs, ys


def _moving_mean(ys: list[Any], w: int) -> list[float | None]:
    """Trailing mean over the last ``w`` finite values (fewer at the start); None where y is None."""
    out: list[float | None] = []
    for i, y in enumerate(ys):
        window = [v for v in ys[max(0, i - w + 1) : i + 1] if v is not None and math.isfinite(v)]
        out.append(sum(window) / len(window) if y is not None and window else None)
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    return escape(str(v))


def _overview(run: RunData) -> str:
    s = run.summary
    n_traj = sum(st.trajectories for st in run.stats.values())
    facts = [
        ("steps", str(len(run.steps))),
        ("trajectories stored", str(n_traj)),
        ("warm-start (SFT) steps", str(len(run.sft))),
    ]
    for key, label in (
        ("reward_first", "mean reward, first 20% of steps"),
        ("reward_last", "mean reward, last 20% of steps"),
        ("reward_gain", "reward gain"),
        ("time_s", "training time (s)"),
    ):
        if isinstance(s.get(key), int | float):
            facts.append((label, _fmt(float(s[key]))))
    facts += _eval_facts(s)
    table = _table(["", ""], [[escape(k), v] for k, v in facts], "facts")
    final = run.metrics[-1] if run.metrics else {}
    metric_rows = [[escape(str(k)), _fmt(v)] for k, v in sorted(final.items()) if k != "step"]
    last = (
        f"<details><summary>every metric of the last step ({len(metric_rows)})</summary>"
        f"{_table(['metric', 'value'], metric_rows, 'metrics')}</details>"
        if metric_rows
        else ""
    )
    return f'<section id="overview"><h2>Overview</h2>{table}{last}</section>'


def _eval_facts(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The overview's lines about ``summary.json``'s evaluations and audit (``agentrl.eval``)."""

    def interval(i: Any) -> str:
        return f"{i['mean']:.3f} [{i['low']:.3f}, {i['high']:.3f}]" if isinstance(i, dict) else "-"

    facts = []
    for key, label in (("eval_before", "eval before RL"), ("eval_after", "eval after the last step")):
        if isinstance(s.get(key), dict):
            e = s[key]
            facts.append((f"{label} (95% CI over {e.get('tasks')} tasks)", interval(e.get("reward"))))
    gain = s.get("eval_gain")
    if isinstance(gain, dict) and isinstance(gain.get("difference"), dict):
        facts.append(
            (
                "eval gain, after − before (paired)",
                f"{interval(gain['difference'])}, p = {gain['p_value']:.3g}",
            )
        )
    audit = s.get("audit")
    if isinstance(audit, dict):
        fired = audit.get("first_divergence_step")
        facts.append(("audit divergence", f"yes, first at step {fired}" if audit.get("divergence") else "no"))
    return facts


def _signal_notice(run: RunData) -> str:
    """A warning when steps gave the policy nothing to learn from (flat curves say nothing by themselves)."""
    steps = run.steps
    bad = no_signal_steps(run.metrics)
    if not bad:
        return ""
    why = " and ".join(sorted(set(bad.values())))
    how = (
        "(<code>train/skipped_update</code> = 1, or <code>critic/advantages/max</code> = "
        "<code>critic/advantages/min</code> = 0: every reward in each group tied, or nothing was trainable)"
    )
    if len(bad) == len(steps):
        head = f"<b>No learning signal in this run:</b> in all {len(steps)} steps, {escape(why)}"
        tail = "so no update changed the policy, and its curves are flat by construction"
    else:
        shown = ", ".join(str(s) for s in sorted(bad)[:12]) + (", …" if len(bad) > 12 else "")
        head = (
            f"<b>{len(bad)} of {len(steps)} steps had no learning signal</b> ({escape(why)}: steps {shown})"
        )
        tail = "those steps did not change the policy"
    if moved := len(bad.keys() & moved_steps(run.metrics)):  # the KL loss or entropy bonus pulled
        tail = (
            f"the reward taught nothing there, but in {moved} of those steps the gradient was not zero "
            "(<code>actor/grad_norm</code> &gt; 0: the KL loss or the entropy bonus moved the policy)"
        )
    return f'<p class="warn" id="no-signal" role="alert">{head} {how}; {tail}.</p>'


def _curves(run: RunData) -> str:
    charts = []
    for title, keys, y_label in CHART_GROUPS:
        if keys[0] == "val/reward/mean" and not any(keys[0] in r for r in run.metrics):
            continue  # the training reward alone is the Reward chart: no evaluation, no chart
        series = [
            (metric_label(k), *_series(run.metrics, k), k) for k in keys
        ]  # human name; the metric's in the tooltip
        if title == "Reward" and len(series[0][1]) >= 10:  # the noisy per-step mean, smoothed
            xs, ys = series[0][1], series[0][2]
            w = max(2, len(xs) // 10)
            series.insert(
                1, (f"{metric_label(keys[0])}, moving mean of {w}", xs, _moving_mean(ys, w), keys[0])
            )
        y_range = (0.0, 1.0) if keys == ("env/answered/frac",) else None
        charts.append(line_chart(title, series, y_label=y_label, y_range=y_range))
    if run.sft:
        charts.append(
            line_chart(
                "Warm start (SFT) loss",
                [(metric_label("sft/loss"), *_series(run.sft, "sft/loss", "sft/step"), "sft/loss")],
                x_label="SFT step",
                y_label="loss",
            )
        )
    body = "".join(c for c in charts if c) or '<p class="note">metrics.jsonl has no rows.</p>'
    return f'<section id="curves"><h2>Training curves</h2><div class="grid">{body}</div></section>'


def _criteria(run: RunData) -> str:
    steps = sorted(run.stats)
    ids = sorted({c for st in run.stats.values() for c in st.criteria})
    if not ids:
        return (
            '<section id="criteria"><h2>Rubric criteria</h2><p class="note">No graded criteria.</p></section>'
        )
    series, rows = [], []
    for cid in ids:
        kind, texts = run.criteria.get(cid, ("positive", []))
        text = texts[0] if len(texts) == 1 else ""
        if len(texts) > 1:
            text = f"{len(texts)} texts in the run's rubrics, e.g. “{texts[0]}”"
        rates = []
        for s in steps:
            met, graded = run.stats[s].criteria.get(cid, [0, 0])
            rates.append(met / graded if graded else None)
        label = cid + (" (flaw: lower is better)" if kind == "negative" else "")
        series.append((label, [float(s) for s in steps], rates))
        known = [r for r in rates if r is not None]
        first, last = (_fmt(known[0]), _fmt(known[-1])) if known else ("–", "–")
        rows.append([f"<b>{escape(cid)}</b>", escape(kind), escape(text), first, last])
    chart = line_chart(
        "Criterion met rate per step", series, y_label="fraction of trajectories", y_range=(0.0, 1.0)
    )
    table = _table(["criterion", "kind", "text", "first step", "last step"], rows, "criteria")
    note = (
        '<p class="note">A criterion is met when its score is above 0 (for a positive criterion: '
        "satisfied; for a negative one: the flaw is present).</p>"
    )
    return f'<section id="criteria"><h2>Rubric criteria</h2>{note}<div class="grid">{chart}</div>{table}</section>'


def _judge(run: RunData) -> str:
    steps = sorted(run.stats)
    xs = [float(s) for s in steps]
    calls = sum(run.stats[s].judge_calls for s in steps)
    cost = sum(run.stats[s].judge_cost_usd for s in steps)
    errors = sum(run.stats[s].judge_errors for s in steps)
    metric_calls = sum(float(r.get("judge/calls", 0) or 0) for r in run.metrics)
    facts = [
        ("judge calls", str(calls) if calls else _fmt(metric_calls)),
        ("cache hits", str(sum(run.stats[s].judge_cache_hits for s in steps))),
        ("prompt tokens", str(sum(run.stats[s].judge_prompt_tokens for s in steps))),
        ("completion tokens", str(sum(run.stats[s].judge_completion_tokens for s in steps))),
        ("cost (USD)", f"{cost:.4f}"),
        ("judge errors", str(errors)),
    ]
    body = _table(["", ""], [[escape(k), v] for k, v in facts], "facts")
    if calls == 0 and metric_calls == 0 and cost == 0:
        body = (
            '<p class="note">No LLM judge calls in this run: every criterion was graded '
            "deterministically (regex, contains, number), so the judge cost nothing.</p>" + body
        )
    else:
        charts = [
            line_chart("Judge calls per step", [("calls", xs, [run.stats[s].judge_calls for s in steps])]),
            line_chart(
                "Judge cost per step",
                [("cost (USD)", xs, [run.stats[s].judge_cost_usd for s in steps])],
                y_label="USD",
            ),
        ]
        body += f'<div class="grid">{"".join(charts)}</div>'
    return f'<section id="judge"><h2>Judge cost</h2>{body}</section>'


def _tools(run: RunData) -> str:
    steps = sorted(run.stats)
    xs = [float(s) for s in steps]
    names = sorted({n for s in steps for n in run.stats[s].tool_calls})
    charts = [
        line_chart(
            "Tool calls per episode, by tool",
            [
                (n, xs, [run.stats[s].tool_calls[n] / max(run.stats[s].trajectories, 1) for s in steps])
                for n in names
            ],
            y_label="calls per episode",
        )
    ]
    counters = ("format_errors", "arg_errors", "unknown_tools", "tool_errors", "tool_timeouts")
    charts.append(
        line_chart(
            "Tool-call problems per episode",
            [
                (c, xs, [run.stats[s].counters[c] / max(run.stats[s].trajectories, 1) for s in steps])
                for c in counters
            ],
            y_label="per episode",
        )
    )
    rows = []
    for n in names:
        calls = sum(run.stats[s].tool_calls[n] for s in steps)
        fails = sum(run.stats[s].tool_failures[n] for s in steps)
        secs = sum(run.stats[s].tool_seconds[n] for s in steps)
        rows.append([f"<b>{escape(n)}</b>", str(calls), str(fails), _fmt(fails / calls), _fmt(secs / calls)])
    table = (
        _table(["tool", "calls", "failed", "failure rate", "mean seconds"], rows, "tools")
        if rows
        else '<p class="note">No tool calls in the stored trajectories.</p>'
    )
    totals = [
        [escape(k), str(sum(run.stats[s].counters[k] for s in steps))]
        for k in sorted({k for s in steps for k in run.stats[s].counters})
    ]
    totals_html = _table(["env counter (all steps)", "total"], totals, "facts") if totals else ""
    return (
        f'<section id="tools"><h2>Tool calls</h2><div class="grid">{"".join(c for c in charts if c)}</div>'
        f"{table}{totals_html}</section>"
    )


def _browser(run: RunData, steps: list[int], max_trajectories: int, source: TokenSource) -> str:
    chosen: list[tuple[int, Trajectory]] = []
    for s in steps:
        trajs = list(read_trajectories(run.trajectory_files[s]))
        chosen.extend((s, t) for t in sample_trajectories(trajs, max_trajectories))
    built = [source.row(t, s) for s, t in chosen]
    rows: list[TokenRow | None] = [r for r, _ in built]
    scale = advantage_scale([r for r in rows if r is not None])
    articles, lists = [], {s: [] for s in steps}
    for k, ((s, t), (row, why)) in enumerate(zip(chosen, built, strict=True)):
        elem = f"t{k}"
        articles.append(
            render_trajectory(
                t,
                elem_id=elem,
                step=s,
                row=row,
                row_note=why,
                scale=scale,
                criterion_texts=run.rubrics.of(t),
            )
        )
        reward = "–" if t.reward is None or t.reward.total is None else f"{t.reward.total:.3g}"
        lists[s].append(
            f'<li><a href="#{elem}" data-target="{elem}">{escape(t.id)}<span class="r">{reward}</span></a></li>'
        )
    if not chosen:
        return '<section id="trajectories"><h2>Trajectories</h2><p class="note">No trajectories stored.</p></section>'
    options = "".join(f'<option value="{s}">step {s} ({len(lists[s])})</option>' for s in steps)
    nav = "".join(f'<ul class="tl" data-step="{s}">{"".join(lists[s])}</ul>' for s in steps)
    coloured = sum(1 for r in rows if r is not None and r.coloured)
    legend = "A: " + "".join(
        f'<span class="{bucket_class(b * scale / BUCKETS, scale)}">{b * scale / BUCKETS:+.2g}</span>'
        for b in range(-BUCKETS, BUCKETS + 1)
    )
    about = (
        f"<p>{len(chosen)} trajectories from {len(steps)} of {len(run.trajectory_files)} steps "
        f"(at most {max_trajectories} a step, spread from the best reward to the worst); "
        f"{coloured} with per-token numbers. Policy tokens are coloured by their advantage "
        f"(blue above 0, red below, full colour at |A| ≥ {scale:.3g}); greyed tokens are masked out "
        "of the loss; hover a token for its numbers. Keys: j / k for the next / previous trajectory.</p>"
        f'<p class="scale">{legend}</p>'
    )
    return (
        f'<section id="trajectories"><h2>Trajectories</h2>{about}<div class="browser">'
        f'<div class="side"><select id="step-select" aria-label="step">{options}</select>{nav}</div>'
        f'<div class="view">{"".join(articles)}</div></div></section>'
    )


def render_report(
    run: RunData,
    *,
    steps: str | None = None,
    max_trajectories: int = 8,
    tokenizer: str | None = None,
) -> str:
    """The whole page for ``run`` as one HTML string. ``steps`` picks the steps whose trajectories
    are embedded (see ``parse_steps``), ``max_trajectories`` caps them per step, ``tokenizer``
    overrides ``RUN_DIR/tokenizer`` for the token view."""
    chosen = parse_steps(steps, sorted(run.trajectory_files))
    source = TokenSource(run.path, run.token_files, tokenizer)
    css, js = _asset("report.css"), _asset("report.js")
    csp = f"default-src 'none'; style-src '{_sha256(css)}'; script-src '{_sha256(js)}'; img-src data:"
    name = escape(Path(run.path).resolve().name)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    toc = "".join(
        f'<a href="#{i}">{t}</a>'
        for i, t in (
            ("overview", "Overview"),
            ("curves", "Curves"),
            ("criteria", "Criteria"),
            ("research", "Research"),
            ("judge", "Judge"),
            ("tools", "Tools"),
            ("trajectories", "Trajectories"),
        )
    )
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>agentrl run report: {name}</title><style>{css}</style></head><body>"
        f"<header><h1>Run report: {name}</h1><p class='path'>{escape(str(run.path))} · generated {when}</p>"
        f"<nav>{toc}</nav></header><main>"
        f"{_signal_notice(run)}{_overview(run)}{_curves(run)}{_criteria(run)}"
        f"{research_section(run.research)}{_judge(run)}{_tools(run)}"
        f"{_browser(run, chosen, max_trajectories, source)}"
        f"</main><script>{js}</script></body></html>\n"
    )
