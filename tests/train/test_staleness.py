"""``rollout.staleness: 1`` (one-step off-policy): the same episodes as on-policy when the weights
cannot move, the version bookkeeping, old log-probs recomputed at the current weights beside the
sampler's, a sampler that never sees weights mid-update, and a lossless resume."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from agentrl.errors import ConfigError
from agentrl.learn.forward import forward_logprobs
from agentrl.sampling.engines import HFSnapshotEngine
from agentrl.train import Trainer
from agentrl.trajectory import read_trajectories
from tests.train.learning_signal import Killed, assert_learning_signal, preempted_run, train_config

pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")

OFF = {"rollout.staleness": 1}


def _rows(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _trajs(run_dir, step):
    return list(read_trajectories(run_dir / "trajectories" / f"step_{step:05d}.jsonl"))


def _fingerprint(module: torch.nn.Module) -> float:
    with torch.no_grad():
        return float(sum(p.double().sum() for p in module.parameters()))


def test_with_weights_that_cannot_move_staleness_1_samples_and_trains_as_staleness_0(tmp_path):
    """One input to both paths: with lr = 0 every version is the same policy, so the overlapped
    driver must sample the same episodes (ids, tokens, rewards) and compute the same update metrics
    as the on-policy loop; only ``policy_version`` and the staleness metric tell them apart."""
    over = {"optim.lr": 0.0, "sft_steps": 0, "steps": 3, "algorithm.recompute_old_logprobs": "always"}
    runs = {}
    for s in (0, 1):
        t = Trainer(train_config(tmp_path / str(s), **over, **{"rollout.staleness": s}), progress=False)
        t.run()
        runs[s] = t.out
    assert_learning_signal(runs[0], 2)
    for step in (1, 2, 3):
        on, off = _trajs(runs[0], step), _trajs(runs[1], step)
        assert [t.id for t in on] == [t.id for t in off]
        for a, b in zip(on, off, strict=True):
            assert a.reward == b.reward and [m.token_ids for m in a.messages] == [
                m.token_ids for m in b.messages
            ]
            assert a.info["policy_version"] == step - 1
            assert b.info["policy_version"] == (0 if step == 1 else step - 2)
    for a, b in zip(_rows(runs[0]), _rows(runs[1]), strict=True):
        assert a["rollout/staleness"] == 0.0 and b["rollout/staleness"] == (0.0 if a["step"] == 1 else 1.0)
        for key in a:
            if key == "actor/rollout_logprob_diff":  # the sampler's float noise (~1e-7): its thread
                assert a[key] == pytest.approx(b[key], abs=1e-6), (a["step"], key)  # may run other kernels
            elif not key.startswith(("timing_s/", "perf/", "rollout/staleness")):
                assert a[key] == b[key], (a["step"], key)


def test_versions_lag_by_one_and_old_logprobs_are_the_current_weights(tmp_path, monkeypatch):
    """Staleness 1 from fresh weights: step k + 1 is sampled by version k − 1 (step 1 by version 0),
    the lag metric is 1 from step 2 on, the update's old log-probs are the current weights' (checked
    by a forward pass here) and the sampler's log-probs, kept as ``rollout_logprobs``, differ from
    them once the policy has moved — a rollout correction has something to correct."""
    seen = []

    def update(self, batch, step):
        with torch.no_grad():
            now = forward_logprobs(self.model, batch, self.cfg.rollout.temperature)[0]
        known = (batch["known_logprobs"] * batch["loss_mask"]).bool()
        gap = (batch["rollout_logprobs"] - batch["old_logprobs"])[known].abs().max().item()
        err = (now - batch["old_logprobs"])[batch["loss_mask"].bool()].abs().max().item()
        seen.append((step, gap, err))
        return original(self, batch, step)

    original = Trainer._update
    monkeypatch.setattr(Trainer, "_update", update)
    t = Trainer(train_config(tmp_path, sft_steps=0, steps=3, **OFF), progress=False)
    t.run()
    assert isinstance(t.engine, HFSnapshotEngine) and t.engine.model is not t.model
    for step in (1, 2, 3):
        assert_learning_signal(t.out, step)
        versions = {tr.info["policy_version"] for tr in _trajs(t.out, step)}
        assert versions == {max(step - 2, 0)}, (step, versions)
    rows = _rows(t.out)
    assert [r["rollout/staleness"] for r in rows] == [0.0, 1.0, 1.0]
    assert [s for s, _, _ in seen] == [1, 2, 3]
    assert all(err < 1e-4 for _, _, err in seen), seen
    assert seen[0][1] < 1e-4 and all(gap > 1e-2 for _, gap, _ in seen[1:]), seen
    assert rows[0]["actor/rollout_logprob_diff"] < 1e-4 < rows[1]["actor/rollout_logprob_diff"]


def test_the_sampler_never_sees_weights_mid_update(tmp_path, monkeypatch):
    """The rollout in flight is made to straddle the update (its first forward pass before the
    optimiser steps, the rest after them): every forward pass of one rollout sees the same weights,
    exactly those of the version stamped on its trajectories, and the versions do differ."""
    bg_started, updated = threading.Event(), threading.Event()
    flights: list[list[float]] = []
    live: dict[int, float] = {}
    overlapped: list[bool] = []
    mine = threading.local()

    def hook(module, args, kwargs):
        if not getattr(mine, "rolling", False):
            return
        flights[-1].append(_fingerprint(module))
        if len(flights[-1]) == 1 and threading.current_thread().name.startswith("agentrl-rollout"):
            bg_started.set()
            assert updated.wait(30)
            updated.clear()

    def update(self, batch, step):
        live[step - 1] = _fingerprint(self.model)
        if self.sampler._flight is not None:
            overlapped.append(bg_started.wait(30))
            bg_started.clear()
        out = original(self, batch, step)
        updated.set()
        return out

    original = Trainer._update
    monkeypatch.setattr(Trainer, "_update", update)
    t = Trainer(train_config(tmp_path, sft_steps=0, steps=3, **OFF), progress=False)
    t.setup()
    t.model.register_forward_pre_hook(hook, with_kwargs=True)  # copied into the sampler's copy
    inner = t.engine.rollout

    def rollout(envs, specs):
        flights.append([])
        mine.rolling = True
        try:
            return inner(envs, specs)
        finally:
            mine.rolling = False

    t.engine.rollout = rollout
    for _ in range(3):
        t.train_step()
    t.sampler.close()
    assert overlapped == [True, True]  # steps 1 and 2 updated while the next rollout ran
    assert len(flights) == 3 and all(len(f) > 2 for f in flights)
    for step, prints in enumerate(flights, start=1):
        (version,) = {tr.info["policy_version"] for tr in _trajs(t.out, step)}
        assert set(prints) == {live[version]}, (step, version)
    assert live[0] != live[1] != live[2]


def _killed_after_step_1(tmp_path):
    over = {**OFF, "algorithm.name": "ppo", "checkpoint_every": 1, "steps": 3}
    with pytest.raises(Killed):
        preempted_run(train_config(tmp_path, **over))
    return over


def test_a_preempted_run_resumes_exactly_with_the_batch_sampled_ahead(tmp_path):
    """Staleness 1, PPO: a run killed after step 1 (its checkpoint holds step 2's batch, sampled by
    version 0, which the checkpoint's weights are not) and resumed equals the uninterrupted run:
    the same trajectories (versions included), metrics and weights."""
    over = _killed_after_step_1(tmp_path / "b")
    state = torch.load(tmp_path / "b" / "run" / "checkpoints" / "step_00001" / "state.pt", weights_only=False)
    (ahead,) = state["presampled"]
    assert (ahead["step"], ahead["version"], len(ahead["trajectories"])) == (2, 0, 4)
    resumed = Trainer(train_config(tmp_path / "b", **over), progress=False)
    resumed.run(resume=True)
    straight = Trainer(train_config(tmp_path / "a", **over), progress=False)
    straight.run()
    run_a, run_b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    for step in (1, 2, 3):
        a, b = _trajs(run_a, step), _trajs(run_b, step)
        assert [x.to_dict() | {"info": 0} for x in a] == [x.to_dict() | {"info": 0} for x in b], step
        assert [x.info["policy_version"] for x in a] == [x.info["policy_version"] for x in b]
    rows_a, rows_b = _rows(run_a), _rows(run_b)
    assert [r["step"] for r in rows_b] == [1.0, 2.0, 3.0]
    for key in (
        "critic/score/mean",
        "actor/pg_loss",
        "actor/grad_norm",
        "critic/vf_loss",
        "rollout/staleness",
    ):
        assert [r[key] for r in rows_a] == [r[key] for r in rows_b], key
    for name in ("model", "critic"):
        ours = getattr(resumed, name).state_dict()
        assert all(torch.equal(v, ours[k]) for k, v in getattr(straight, name).state_dict().items()), name


def test_a_checkpoint_without_a_batch_ahead_resumes_by_sampling_now(tmp_path):
    """A staleness-0 checkpoint resumed with staleness 1: step 2 is sampled on resume by the
    checkpoint's weights (version 1, lag 0), then the overlap starts again."""
    over = {"sft_steps": 0, "checkpoint_every": 1}
    Trainer(train_config(tmp_path, **over, steps=1), progress=False).run()
    t = Trainer(train_config(tmp_path, **over, **OFF, steps=3), progress=False)
    t.run(resume=True)
    assert [{x.info["policy_version"] for x in _trajs(t.out, s)} for s in (2, 3)] == [{1}, {1}]
    assert [r["rollout/staleness"] for r in _rows(t.out)] == [0.0, 0.0, 1.0]


def test_staleness_1_with_fsdp_and_the_hf_engine_is_a_config_error(tmp_path, monkeypatch):
    from agentrl.train import engines

    monkeypatch.setattr(engines, "is_sharded", lambda model: True)
    with pytest.raises(ConfigError, match="staleness: 1 with engine hf"):
        Trainer(train_config(tmp_path, sft_steps=0, **OFF), progress=False).setup()


def test_torch_threads_sets_the_trainer_and_the_sampler_thread(tmp_path):
    before = torch.get_num_threads()
    want = 3 if before != 3 else 2
    seen = []
    try:
        over = {**OFF, "rollout.torch_threads": want, "sft_steps": 0, "steps": 2}
        t = Trainer(train_config(tmp_path, **over), progress=False)
        t.setup()
        inner = t.engine.rollout

        def rollout(envs, specs):
            seen.append((threading.current_thread().name.split("_")[0], torch.get_num_threads()))
            return inner(envs, specs)

        t.engine.rollout = rollout
        t.train_step()
        t.train_step()
        t.sampler.close()
    finally:
        torch.set_num_threads(before)
    assert seen == [("MainThread", want), ("agentrl-rollout", want)]
