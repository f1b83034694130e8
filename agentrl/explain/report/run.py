"""Read a training run directory for the report: metrics, warm-start losses, per-step statistics
from the stored trajectories (criterion pass rates, judge calls and cost, tool calls), the research
shares of its evaluations and first and last RL steps, and a sample of trajectories to show.

A run directory is what ``agentrl train`` writes (its layout: ``agentrl.rundir``): ``metrics.jsonl``,
``sft.jsonl``, ``summary.json``, ``trajectories/step_NNNNN.jsonl``, ``eval/step_NNNNN.jsonl``,
``tokens/step_NNNNN.npz`` and ``tokenizer/``. Only ``metrics.jsonl`` or ``trajectories/`` is
required; everything else is shown when present.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError
from agentrl.explain.report.research import ResearchRow, research_rows
from agentrl.explain.report.rubrics import RubricTexts
from agentrl.rundir import METRICS, TRAJECTORIES, RunDir
from agentrl.trajectory import Trajectory, read_trajectories

__all__ = ["RunData", "StepStats", "load_run", "parse_steps", "sample_trajectories"]

#: Counters the env keeps in ``Trajectory.info``, summed over a step.
ENV_COUNTERS = (
    "tool_calls",
    "format_errors",
    "unknown_tools",
    "arg_errors",
    "tool_errors",
    "tool_timeouts",
    "obs_truncations",
    "injected_faults",
)


@dataclass
class StepStats:
    """What one step's trajectories say: criterion verdicts, judge usage and tool calls."""

    step: int
    trajectories: int = 0
    judge_errors: int = 0
    #: criterion id → [met, graded]; "met" is a score above 0 (for a negative criterion: the flaw is there)
    criteria: dict[str, list[int]] = field(default_factory=dict)
    judge_calls: int = 0
    judge_cache_hits: int = 0
    judge_prompt_tokens: int = 0
    judge_completion_tokens: int = 0
    judge_cost_usd: float = 0.0
    tool_calls: Counter[str] = field(default_factory=Counter)  # tool name → calls
    tool_failures: Counter[str] = field(default_factory=Counter)  # tool name → calls with ok false
    tool_seconds: Counter[str] = field(default_factory=Counter)  # tool name → seconds in all
    counters: Counter[str] = field(default_factory=Counter)  # ENV_COUNTERS summed

    def add(self, t: Trajectory) -> None:
        """Count one trajectory of this step."""
        self.trajectories += 1
        r = t.reward
        if r is not None:
            self.judge_errors += r.status == "judge_error"
            self.judge_calls += r.calls
            self.judge_cache_hits += r.cache_hits
            self.judge_prompt_tokens += r.prompt_tokens
            self.judge_completion_tokens += r.completion_tokens
            self.judge_cost_usd += r.cost_usd
            for c in r.criteria:
                met_graded = self.criteria.setdefault(c.id, [0, 0])
                met_graded[0] += c.score > 0
                met_graded[1] += 1
        for entry in t.info.get("tool_log") or []:
            if not isinstance(entry, dict):
                continue
            name = str(entry.get("tool", "?"))
            self.tool_calls[name] += 1
            self.tool_failures[name] += entry.get("ok") is False
            seconds = entry.get("seconds")
            if isinstance(seconds, int | float) and math.isfinite(seconds):
                self.tool_seconds[name] += float(seconds)
        for key in ENV_COUNTERS:
            value = t.info.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                self.counters[key] += int(value)


@dataclass
class RunData:
    """Everything the report shows about one run, except the token arrays (read per trajectory)."""

    path: Path
    metrics: list[dict[str, Any]]
    sft: list[dict[str, Any]]
    summary: dict[str, Any]
    stats: dict[int, StepStats]
    #: criterion id → (kind, its distinct texts), from the rubrics that scored the trajectories and
    #: the verdicts; one id (``accuracy``, say) can have a different text in each task's rubric
    criteria: dict[str, tuple[str, list[str]]]
    trajectory_files: dict[int, Path]
    token_files: dict[int, Path]
    #: each trajectory's criterion texts, from the rubric that scored it
    rubrics: RubricTexts = field(default_factory=lambda: RubricTexts(Path(".")))
    #: research or recall (``agentrl.eval.research``) of the evaluations and the first and last RL steps
    research: list[ResearchRow] = field(default_factory=list)

    @property
    def steps(self) -> list[int]:
        """Every RL step that has metrics or trajectories, in order (not step 0: an evaluation before RL)."""
        logged = {
            int(r["step"]) for r in self.metrics if isinstance(r.get("step"), int | float) and r["step"] >= 1
        }
        return sorted(logged | set(self.trajectory_files))


def load_run(run_dir: Path | str) -> RunData:
    """Read ``run_dir`` and count, step by step, what its trajectories say. Raises ``ConfigError``
    when it is not a run directory (neither ``metrics.jsonl`` nor ``trajectories/``)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise ConfigError(f"{path}: no such run directory")
    run = RunDir(path)
    traj_files = run.trajectory_files()
    if not run.is_run():
        raise ConfigError(f"{path}: not a training run (no {METRICS} and no {TRAJECTORIES}/step_*.jsonl)")
    stats: dict[int, StepStats] = {}
    criteria: dict[str, tuple[str, list[str]]] = {}
    rubrics = RubricTexts(path, _override(run))
    for step in sorted(traj_files):
        s = stats[step] = StepStats(step)
        for t in read_trajectories(traj_files[step]):
            s.add(t)
            _collect_criteria(rubrics.of(t), t, criteria)
    return RunData(
        path=path,
        metrics=run.metrics(),
        sft=run.sft(),
        summary=run.summary(),
        stats=stats,
        criteria=criteria,
        trajectory_files=traj_files,
        token_files=run.token_files(),
        rubrics=rubrics,
        research=research_rows(run),
    )


def _override(run: RunDir) -> str | None:
    """The run's ``judge.rubric`` (it scored every trajectory), from its stored config."""
    try:
        judge = run.config().get("judge")
    except (OSError, ValueError, ConfigError):
        return None
    rubric = judge.get("rubric") if isinstance(judge, dict) else None
    return rubric if isinstance(rubric, str) else None


def _collect_criteria(
    texts: dict[str, tuple[str, str]], t: Trajectory, out: dict[str, tuple[str, list[str]]]
) -> None:
    for cid, (kind, text) in texts.items():
        texts = out.setdefault(cid, (kind, []))[1]
        if text and text not in texts:
            texts.append(text)
    for c in t.reward.criteria if t.reward else []:
        out.setdefault(c.id, (c.kind, []))


def parse_steps(spec: str | None, available: list[int], default_count: int = 6) -> list[int]:
    """The steps whose trajectories are embedded. ``spec``: ``"all"``, ``"last"``, or a comma list
    of steps and ranges (``"1,10-20,60"``); ``None`` picks ``default_count`` steps spread evenly
    from the first to the last. Steps without trajectories are left out; raises ``ConfigError``
    on a malformed spec or when nothing is left."""
    if not available:
        return []
    if spec is None:
        if len(available) <= default_count:
            return list(available)
        idx = {round(i * (len(available) - 1) / (default_count - 1)) for i in range(default_count)}
        return [available[i] for i in sorted(idx)]
    spec = spec.strip().lower()
    if spec == "all":
        return list(available)
    if spec == "last":
        return [available[-1]]
    wanted: set[int] = set()
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m:
            raise ConfigError(f"--steps: {part.strip()!r} is not a step or a range like 10-20")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo:
            raise ConfigError(f"--steps: range {part.strip()!r} runs backwards")
        wanted.update(range(lo, hi + 1))
    chosen = [s for s in available if s in wanted]
    if not chosen:
        raise ConfigError(
            f"--steps {spec!r}: none of these steps has trajectories (steps {available[0]}–{available[-1]})"
        )
    return chosen


def _reward_key(t: Trajectory) -> float:
    r = t.reward
    return r.total if r is not None and r.total is not None else -math.inf


def sample_trajectories(trajs: list[Trajectory], k: int) -> list[Trajectory]:
    """At most ``k`` trajectories spread over the reward range (the best and the worst included),
    ordered by reward, best first; deterministic."""
    ranked = sorted(trajs, key=lambda t: (-_reward_key(t), t.id))
    if k <= 0 or len(ranked) <= k:
        return ranked if k > 0 else []
    if k == 1:
        return ranked[:1]
    idx = sorted({round(i * (len(ranked) - 1) / (k - 1)) for i in range(k)})
    return [ranked[i] for i in idx]
