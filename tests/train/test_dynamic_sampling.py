"""DAPO's dynamic sampling: zero-variance groups are dropped and refilled (``fill_groups``), and the
trainer's rollout phase runs the refill rounds and trains only on the groups kept."""

from __future__ import annotations

import pytest

from agentrl.learn.batch import is_truncated
from agentrl.learn.dynamic_sampling import fill_groups, groups_with_signal, refill_order
from agentrl.train import Trainer
from agentrl.trajectory import RewardBreakdown, Trajectory, read_trajectories
from tests.train.learning_signal import train_config


def _traj(task: str, s: int, reward: float | None) -> Trajectory:
    bd = (
        RewardBreakdown(total=None, status="judge_error")
        if reward is None
        else RewardBreakdown(total=reward, normalized=reward)
    )
    return Trajectory(id=f"{task}#{s}", task_id=task, messages=[], reward=bd)


def _group(task: str, *rewards: float | None) -> list[Trajectory]:
    return [_traj(task, s, r) for s, r in enumerate(rewards)]


def test_groups_with_signal_by_hand():
    rewards = [1.0, 0.0, 0.5, 0.5, None, 0.3, None, None, 0.0, 0.0]
    groups = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e"]
    # a varies; b equal; c has one scored sample; d only judge errors; e equal zeros
    assert groups_with_signal(rewards, groups) == {"a"}


def test_fill_groups_refills_drops_and_truncates():
    first = _group("a", 1, 0) + _group("b", 1, 1) + _group("c", 0, 0) + _group("d", 0.2, 0.7)
    asked: list[int] = []
    rounds = iter(
        [
            _group("e", 0, 0) + _group("f", 0, 1),  # round 2: f kept, e dropped
            _group("g", 1, 0) + _group("h", 0, 0.5) + _group("i", 1, 0),  # round 3: 3 kept, 1 surplus
        ]
    )

    def more(n: int) -> list[Trajectory]:
        asked.append(n)
        return next(rounds)

    keep, sampled, m = fill_groups(first, more, target=4, max_rounds=5, normalize=True)
    # round 2: 2 missing, 2 of 4 kept so far → ask 2 / 0.5 = 4; round 3: 1 missing, 3 of 6 → 2
    assert asked == [4, 2]
    assert [t.id for t in keep] == ["a#0", "a#1", "d#0", "d#1", "f#0", "f#1", "g#0", "g#1"]
    assert len(sampled) == 2 * 9
    assert m == {"train/dropped_groups": 3.0, "train/sampling_rounds": 3.0, "train/prompts_sampled": 9.0}


def test_fill_groups_stops_at_max_rounds_and_when_tasks_run_out():
    flat = _group("a", 0, 0) + _group("b", 1, 1)
    calls: list[int] = []

    def more(n: int) -> list[Trajectory]:
        calls.append(n)
        return _group(f"x{len(calls)}", 0.5, 0.5)

    keep, _, m = fill_groups(flat, more, target=2, max_rounds=3, normalize=True)
    assert keep == [] and calls == [8, 8] and m["train/sampling_rounds"] == 3.0
    assert m["train/dropped_groups"] == 4.0
    keep, _, m = fill_groups(flat, lambda n: [], target=2, max_rounds=3, normalize=True)
    # no task left to refill with: the round that sampled nothing is not counted
    assert keep == [] and m["train/sampling_rounds"] == 1.0 and m["train/prompts_sampled"] == 2.0
    # every group has signal: one round, nothing asked
    keep, _, m = fill_groups(_group("a", 0, 1), more, target=1, max_rounds=3, normalize=True)
    assert len(keep) == 2 and m["train/sampling_rounds"] == 1.0 and len(calls) == 2


def test_fill_groups_compares_the_reward_trained_on():
    # equal totals, different normalised scores: signal only when training on the normalised score
    a = [
        Trajectory(id=f"a#{s}", task_id="a", messages=[], reward=RewardBreakdown(total=1.0, normalized=n))
        for s, n in enumerate((0.2, 0.4))
    ]
    assert len(fill_groups(a, lambda n: [], target=1, max_rounds=1, normalize=True)[0]) == 2
    assert fill_groups(a, lambda n: [], target=1, max_rounds=1, normalize=False)[0] == []


def test_refill_order_skips_the_drawn_tasks_in_a_seeded_order():
    tasks = [f"t{i}" for i in range(20)]
    a = refill_order(tasks, ["t3", "t7"], lambda t: t, seed=5)
    assert sorted(a) == sorted(set(tasks) - {"t3", "t7"})
    assert a == refill_order(tasks, ["t7", "t3"], lambda t: t, seed=5) != refill_order(tasks, [], str, 6)[:18]


def test_truncated_means_cut_by_a_budget_without_a_report():
    def t(**info):
        return Trajectory(id="x", task_id="x", messages=[], info=info)

    assert is_truncated(t(truncated_reason="max_turns", terminated=False))
    assert is_truncated(t(truncated_reason="generation_limit", terminated=False))
    assert not is_truncated(t(truncated_reason=None, terminated=True))
    assert not is_truncated(t(terminated=False))


class _FlatFirstRound:
    """The trainer's judge, with every reward of its first call set to 0 (no group has signal)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def score(self, trajs):
        out = self.inner.score(trajs)
        self.calls += 1
        if self.calls == 1:
            for t in trajs:
                t.reward = t.reward.model_copy(update={"total": 0.0, "normalized": 0.0})
        return out

    def close(self):
        self.inner.close()


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")
def test_the_trainer_refills_dropped_groups_and_trains_on_the_kept(tmp_path):
    cfg = train_config(tmp_path, sft_steps=0, **{"algorithm.dynamic_sampling.enable": True})
    t = Trainer(cfg, progress=False)
    t.setup()
    t.judge = _FlatFirstRound(t.judge)
    first = {s.task.id for s in t._jobs(1)}
    m = t.train_step()
    assert m["train/dropped_groups"] >= 2 and m["train/sampling_rounds"] >= 2
    assert m["train/prompts_sampled"] >= 2 + 8  # round 2 asks 4× the 2 missing groups (none kept yet)
    saved = list(read_trajectories(tmp_path / "run" / "trajectories" / "step_00001.jsonl"))
    groups = {x.task_id for x in saved}
    assert len(groups) == 2 and not groups & first  # the refill's tasks, none of the first draw
    for g in groups:
        assert len({x.reward.normalized for x in saved if x.task_id == g}) == 2
    assert m["train/skipped_update"] == 0.0 and m["train/tokens"] > 0


def test_dynamic_sampling_with_staleness_1_is_refused_in_one_line():
    from agentrl.errors import ConfigError
    from agentrl.train.config import TrainConfig, load_train_config

    with pytest.raises(ValueError, match="use one of them"):
        TrainConfig.model_validate(
            {"algorithm": {"dynamic_sampling": {"enable": True}}, "rollout": {"staleness": 1}}
        )
    with pytest.raises(ConfigError, match="use one of them"):
        load_train_config(
            "examples/quickstart.yaml",
            {"algorithm.dynamic_sampling.enable": True, "rollout.staleness": 1},
        )


@pytest.mark.parametrize(("max_rounds", "normalize"), [(7, False), (2, True)])
def test_the_step_passes_max_rounds_and_the_runs_normalize_to_the_refill(monkeypatch, max_rounds, normalize):
    """``algorithm.dynamic_sampling.max_rounds`` and ``judge.normalize`` (the reward compared is the
    one trained on) reach ``fill_groups`` from the step, whatever their defaults."""
    from types import SimpleNamespace

    import agentrl.train.step_sampling as step_sampling
    from agentrl.train.config import TrainConfig

    seen = {}

    def fill_groups(trajs, more, **kw):
        seen.update(kw)
        return trajs, trajs, {}

    monkeypatch.setattr(step_sampling, "fill_groups", fill_groups)
    ds = {"enable": True, "max_rounds": max_rounds}
    cfg = TrainConfig.model_validate(
        {"algorithm": {"dynamic_sampling": ds}, "judge": {"normalize": normalize}}
    )
    trajs = _group("a", 0, 1) + _group("b", 1, 1)
    me = SimpleNamespace(cfg=cfg, tasks=[], _step_tasks=lambda step: [], _my_share=list)
    keep, sampled = step_sampling.StepSampling._dynamic_sampling(me, 1, trajs, {})
    assert keep == sampled == trajs
    assert seen == {"target": 2, "max_rounds": max_rounds, "normalize": normalize}
