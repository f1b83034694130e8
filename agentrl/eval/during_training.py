"""Evaluation during training: the trainer's engine samples a fixed set of eval episodes, the run's
judge scores them, and nothing is updated.

``Evaluation`` is built by the trainer (``agentrl.train.evaluation``), which hands it the engine's
rollout function, the run's judge and the collectives; this module never imports the trainer.

- Episodes: the first ``limit`` tasks of ``eval.split`` of ``eval.suite`` (default: the run's suite,
  split ``heldout``), ``n`` samples each, seeded ``episode_seed(eval.seed, task, sample)`` at every
  evaluation (so evaluations, and ``agentrl rollout --seed`` files, pair by task and sample), in
  env instances of their own built from the run's env settings; batches of ``batch`` episodes.
- Metrics (``val_metrics``), merged into the step's row of ``metrics.jsonl`` (step 0 = before RL):
  verl's ``val-core/<suite>/reward/mean@N`` (and ``best@N/mean``; ``val-aux/.../std@N``,
  ``worst@N/mean``), and ``val/reward/mean`` with ``val/reward/ci_low``/``ci_high`` (95% over tasks),
  ``val/pass@k``, ``val/tool_call_episodes``, ``val/unanswered``, ``val/token_limit``,
  ``val/official_share``, ``val/judge_errors``, ``val/episodes``, ``val/tasks``, ``timing_s/eval``.
- The judged episodes go to ``RUN/eval/step_NNNNN.jsonl`` (``agentrl.rundir``).
- With ``eval.audit``, the audit judge re-scores every eval episode (``val-audit/...``) and a sample
  of every ``audit.every``-th training step (``audit/...``, ``RUN/audit/step_NNNNN.jsonl``), and the
  divergence check runs on each series (``agentrl.eval.audit``).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentrl.env import ResearchEnv
from agentrl.env.sources import page_kinds
from agentrl.env.suite import load_suite
from agentrl.errors import ConfigError
from agentrl.eval.audit import Auditor, Divergence
from agentrl.eval.compare import compare
from agentrl.eval.config import DEFAULT_SPLIT, EvalConfig
from agentrl.eval.scorecard import Scorecard, scorecard
from agentrl.rollout.episode import EpisodeSpec
from agentrl.rundir import RunDir, read_jsonl
from agentrl.seeds import stable_seed
from agentrl.trajectory import Trajectory, read_trajectories, write_trajectories

__all__ = ["Evaluation", "audit_summary", "eval_env_config", "eval_summary", "val_metrics"]

RolloutFn = Callable[[Sequence[Any], Sequence[EpisodeSpec]], list[Trajectory]]


def eval_env_config(cfg: EvalConfig, env_config: dict[str, Any]) -> dict[str, Any]:
    """The eval episodes' env config: the run's (budgets, tools, format, prompt), with the eval
    suite and split. ``ConfigError`` when the split has no task: with ``eval.split`` unset, one that
    says to set it or ``eval.suite``, naming the splits the suite has."""
    env = json.loads(json.dumps(env_config))
    if cfg.suite is not None:
        env["suite"] = cfg.suite
    env["split"] = cfg.split_name
    suite = load_suite(env["suite"])
    if cfg.split is None and DEFAULT_SPLIT not in suite.splits:
        have = ", ".join(f"{k} ({v})" for k, v in suite.splits.items()) or "none"
        raise ConfigError(
            f"eval: suite {env['suite']!r} has no {DEFAULT_SPLIT!r} split to evaluate on (its splits: {have}); "
            "set eval.suite to a suite with held-out tasks (agentrl sandbox build --heldout-companies K), "
            "or eval.split"
        )
    try:
        suite.tasks_in(cfg.split_name)  # a split with no task: ConfigError naming the splits
    except ConfigError as e:
        raise ConfigError(f"eval.split: {e}") from None
    return env


def val_metrics(card: Scorecard, source: str) -> dict[str, float]:
    """The metrics of one evaluation's scorecard (see the module docstring); ``source`` names the
    eval suite (verl's data source)."""
    n = card.samples_per_task
    m: dict[str, float] = {"val/episodes": float(card.episodes), "val/tasks": float(card.tasks)}
    m["val/judge_errors"] = float(card.judge_errors)
    if card.reward is not None:
        m[f"val-core/{source}/reward/mean@{n}"] = card.reward.mean
        m["val/reward/mean"] = card.reward.mean
        m["val/reward/ci_low"], m["val/reward/ci_high"] = card.reward.low, card.reward.high
        if card.std_at_n is not None:
            m[f"val-aux/{source}/reward/std@{n}"] = card.std_at_n
        if n > 1 and card.best_at_n is not None and card.worst_at_n is not None:
            m[f"val-core/{source}/reward/best@{n}/mean"] = card.best_at_n
            m[f"val-aux/{source}/reward/worst@{n}/mean"] = card.worst_at_n
        m |= {f"val/pass@{k}": v for k, v in card.pass_at_k.items()}
    for key in ("tool_call_episodes", "unanswered", "token_limit", "official_share"):
        value = getattr(card, key)
        if value is not None:
            m[f"val/{key}"] = float(value)
    return m


def _source_name(suite: str) -> str:
    return Path(suite).name if suite != "sandbox" else "sandbox"


class Evaluation:
    """Evaluations and audits of one run (see the module docstring). Every rank builds one;
    ``evaluate`` is collective (each rank samples its share of the episodes), the rest runs on the
    main rank."""

    def __init__(
        self,
        cfg: EvalConfig,
        *,
        run_dir: Path,
        env_config: dict[str, Any],
        rollout: RolloutFn,
        score: Callable[[list[Trajectory]], Any],
        batch: int,
        steps: int,
        seed: int,
        ranks: int = 1,
        share: Callable[[list[Any]], list[Any]] = lambda xs: xs,
        gather: Callable[[list[Trajectory]], list[list[Trajectory]]] = lambda xs: [xs],
        main: bool = True,
        note: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.cfg, self.run, self.seed, self.steps = cfg, RunDir(run_dir), seed, steps
        self.rollout, self.score, self.batch = rollout, score, max(1, batch)
        self.share, self.gather, self.main, self.note = share, gather, main, note
        self.ranks = ranks
        self.env_config = eval_env_config(cfg, env_config) if cfg.runs else None
        self.tasks: list[Any] = []
        self.kinds: dict[str, str] = {}
        self.source = ""
        if self.env_config is not None:
            suite = load_suite(self.env_config["suite"])
            self.tasks = suite.tasks_in(cfg.split_name)[: cfg.limit]
            self.kinds = page_kinds(suite)
            self.source = _source_name(str(self.env_config["suite"]))
        self.envs: list[ResearchEnv] = []
        self.auditor = Auditor(cfg.audit) if cfg.audit is not None and main else None
        if self.auditor is not None:
            self._restore_points()

    # ---- when ------------------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        """Whether an evaluation runs after RL step ``step``."""
        c = self.cfg
        return bool(c.every and step % c.every == 0) or (c.at_end and step == self.steps)

    def audit_due(self, step: int) -> bool:
        a = self.cfg.audit
        return a is not None and a.every > 0 and step % a.every == 0

    # ---- evaluation ------------------------------------------------------------------------------
    def specs(self, step: int) -> list[EpisodeSpec]:
        """Every eval episode, in task then sample order (the same seeds at every evaluation)."""
        out = []
        for t in self.tasks:
            for s in range(self.cfg.n):
                out.append(EpisodeSpec.drawn(t, s, self.cfg.seed, policy=f"train:step{step}", eval_step=step))
        return out

    def _envs(self, n: int) -> list[ResearchEnv]:
        while len(self.envs) < n:
            self.envs.append(ResearchEnv(self.env_config))
        return self.envs[:n]

    def evaluate(self, step: int) -> dict[str, float]:
        """Run, judge and store the evaluation after RL step ``step`` (collective); the main rank
        returns its metrics (and prints one line), the others ``{}``."""
        t0 = time.perf_counter()
        specs = self.specs(step)
        mine = self.share(specs)
        trajs: list[Trajectory] = []
        # Every rank runs the same number of rollouts (an engine's rollout may be collective: FSDP
        # gathers the weights), some of them empty.
        per_rank = math.ceil(len(specs) / self.ranks)
        rounds = math.ceil(per_rank / self.batch)
        for i in range(rounds):
            chunk = mine[i * self.batch : (i + 1) * self.batch]
            trajs += self.rollout(self._envs(len(chunk)), chunk)
        self.score(trajs)
        everyone = [t for part in self.gather(trajs) for t in part]
        if not self.main:
            return {}
        card = scorecard(everyone, kinds=self.kinds, pass_threshold=self.cfg.pass_threshold,
                         n_boot=self.cfg.n_boot, seed=self.cfg.seed)  # fmt: skip
        m = val_metrics(card, self.source)
        if self.auditor is not None:
            audited = self.auditor.audit(everyone)
            everyone = audited.trajectories + [
                t for t in everyone if t.reward is None or t.reward.total is None
            ]
            m |= self._agreement_metrics("val", "val-audit", step, audited.agreement)
        write_trajectories(self.run.eval_file(step), everyone)
        m["timing_s/eval"] = time.perf_counter() - t0
        r = card.reward
        self.note(
            f"eval {'before RL' if step == 0 else f'after step {step}'}: mean normalised reward "
            + (f"{r.mean:.3f} [{r.low:.3f}, {r.high:.3f}]" if r else "-")
            + f" over {card.tasks} {self.cfg.split_name} tasks × {self.cfg.n}"
            + (f" ({card.judge_errors} judge errors)" if card.judge_errors else "")
        )
        return m

    # ---- audits ----------------------------------------------------------------------------------
    def audit_step(self, step: int) -> dict[str, float]:
        """Main rank: re-score a seeded sample of training step ``step``'s stored trajectories."""
        if self.auditor is None or not self.audit_due(step):
            return {}
        assert self.cfg.audit is not None
        t0 = time.perf_counter()
        path = self.run.trajectory_file(step)
        trajs = list(read_trajectories(path)) if path.exists() else []
        rng = random.Random(stable_seed(self.seed, "audit", step, bits=31))  # never the global RNG
        picked = rng.sample(trajs, min(self.cfg.audit.sample, len(trajs)))
        audited = self.auditor.audit(picked)
        write_trajectories(self.run.audit_file(step), audited.trajectories)
        m = self._agreement_metrics("train", "audit", step, audited.agreement)
        m["timing_s/audit"] = time.perf_counter() - t0
        return m

    def _agreement_metrics(self, series: str, prefix: str, step: int, found: Any) -> dict[str, float]:
        if found is None or self.auditor is None:
            return {}
        m = {f"{prefix}/train_mean": found.train_mean, f"{prefix}/audit_mean": found.audit_mean,
             f"{prefix}/episodes": float(found.episodes)}  # fmt: skip
        if found.flip_rate is not None:
            m[f"{prefix}/flip_rate"] = found.flip_rate
        if found.kappa is not None:
            m[f"{prefix}/kappa"] = found.kappa
        check = self.auditor.add_point(series, step, found)
        if check is not None:
            m[f"{prefix}/train_slope"], m[f"{prefix}/audit_slope"] = check.train_slope, check.audit_slope
            m["audit/divergence"] = max(m.get("audit/divergence", 0.0), float(check.fires))
            if check.fires:
                self.note(_warning(series, check))
        return m

    def _restore_points(self) -> None:
        """A resumed run continues the divergence check from the points it logged."""
        assert self.auditor is not None
        for row in read_jsonl(self.run.metrics_file):
            for series, prefix in (("train", "audit"), ("val", "val-audit")):
                if f"{prefix}/train_mean" in row and f"{prefix}/audit_mean" in row:
                    self.auditor.points[series].append(
                        (int(row["step"]), row[f"{prefix}/train_mean"], row[f"{prefix}/audit_mean"])
                    )

    def close(self) -> None:
        if self.auditor is not None:
            self.auditor.close()


def _warning(series: str, d: Divergence) -> str:
    what = "sampled training episodes" if series == "train" else "eval episodes"
    return (
        f"warning: audit divergence on {what}, steps {d.steps[0]}-{d.steps[-1]}: the training judge's "
        f"reward rises ({d.train_slope:+.3f}/step) while the audit judge's falls ({d.audit_slope:+.3f}/step); "
        "the policy may be exploiting the training judge (audit/divergence = 1)"
    )


def eval_summary(
    run: RunDir, last_step: int, *, kinds: dict[str, str] | None = None, pass_threshold: float = 1.0,
    n_boot: int = 10_000, seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """``eval_before`` (the evaluation at step 0), ``eval_after`` (the one after ``last_step``) and,
    with both, ``eval_gain`` (the paired comparison after − before), from the run's stored eval files."""
    files, out = run.eval_files(), {}
    loaded: dict[int, list[Trajectory]] = {}
    for key, step in (("eval_before", 0), ("eval_after", last_step)):
        if step in files and (step > 0 or key == "eval_before"):
            loaded[step] = list(read_trajectories(files[step]))
            card = scorecard(
                loaded[step], kinds=kinds, pass_threshold=pass_threshold, n_boot=n_boot, seed=seed
            )
            out[key] = {"step": step, "file": str(files[step]), **card.model_dump(mode="json")}
    if 0 in loaded and last_step in loaded and last_step > 0:
        try:
            gain = compare(loaded[0], loaded[last_step], a_name="eval before RL (step 0)",
                           b_name=f"eval after step {last_step}", n_boot=n_boot, seed=seed)  # fmt: skip
            out["eval_gain"] = gain.model_dump(mode="json")
        except ConfigError as e:  # nothing scored on one side: say so rather than fail the summary
            out["eval_gain"] = {"error": str(e)}
    return out


def audit_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The audit's part of ``summary.json``: whether (and first when) the divergence check fired,
    and the last agreement logged of each series. ``{}`` when the run audited nothing."""
    audited = [r for r in rows if any(k.startswith(("audit/", "val-audit/")) for k in r)]
    if not audited:
        return {}
    fired = [int(r["step"]) for r in audited if r.get("audit/divergence") == 1.0]
    out: dict[str, Any] = {"divergence": bool(fired), "first_divergence_step": fired[0] if fired else None}
    for prefix in ("audit", "val-audit"):
        last = [r for r in audited if f"{prefix}/train_mean" in r]
        if last:
            out[prefix] = {"step": int(last[-1]["step"])} | {
                k.split("/", 1)[1]: v
                for k, v in last[-1].items()
                if k.startswith(f"{prefix}/") and k != "audit/divergence"
            }
    return out
