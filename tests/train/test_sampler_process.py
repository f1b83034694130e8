"""``rollout.sampler: process``: the staleness-1 sampler in a child process samples exactly what the
in-thread sampler samples (before and after a weight sync), a failure or death of the child reaches
the caller as one line instead of a hang, and a staleness-1 run through it (preempted, resumed)
equals an uninterrupted run through the thread."""

from __future__ import annotations

import json
from copy import deepcopy

import pytest
import torch

from agentrl.errors import SamplerError
from agentrl.rollout.episode import EpisodeSpec
from agentrl.sampling.engines import EpisodeLoop, HFSnapshotEngine
from agentrl.sampling.process import ProcessSnapshotEngine
from agentrl.train import Trainer
from agentrl.trajectory import read_trajectories
from tests.train.learning_signal import Killed, assert_learning_signal, preempted_run, train_config

pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")

PROC = {"rollout.staleness": 1, "rollout.sampler": "process"}


def _same_samples(a, b):
    """Two rollouts of the same specs: the same episodes, token for token, log-probs to 1e-6."""
    assert [t.id for t in a] == [t.id for t in b]
    turns = 0
    for x, y in zip(a, b, strict=True):
        assert [(m.role, m.content, m.token_ids) for m in x.messages] == [
            (m.role, m.content, m.token_ids) for m in y.messages
        ]
        for m, n in zip(x.messages, y.messages, strict=True):
            if m.logprobs is not None:
                turns += 1
                assert max(abs(p - q) for p, q in zip(m.logprobs, n.logprobs, strict=True)) < 1e-6
    assert turns > 0


def test_the_process_sampler_samples_what_the_thread_sampler_samples(tmp_path):
    """One input to both samplers: the same weights and specs give the same trajectories; after the
    live policy moves and both sync, they agree again (and differ from before the move); an error in
    the child comes back as one line and the child serves on; a killed child is noticed."""
    t = Trainer(train_config(tmp_path, sft_steps=0, **PROC), progress=False)
    t.setup()
    proc = t.engine
    assert isinstance(proc, ProcessSnapshotEngine)
    r = t.cfg.rollout
    loop = EpisodeLoop(t.sampling, t.sampling.expander(deepcopy(t.tokenizer)), t.pool)
    thread = HFSnapshotEngine(t.model, loop, pad_id=t.pad_id, kv_cache_tokens=r.kv_cache_tokens)
    try:
        jobs = t._jobs(1)
        before = thread.rollout(t._envs(len(jobs)), jobs)
        _same_samples(before, proc.rollout([], jobs))
        with torch.no_grad():  # the live policy moves; both samplers sync to it
            for p in t.model.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.5)
        for engine in (thread, proc):
            engine.after_update(t.model, 1)
        after = thread.rollout(t._envs(len(jobs)), jobs)
        _same_samples(after, proc.rollout([], jobs))
        assert [m.token_ids for x in before for m in x.messages] != [
            m.token_ids for x in after for m in x.messages
        ]

        with pytest.raises(SamplerError) as bad:
            proc.rollout([], [EpisodeSpec("x#0", "no-such-task", 0)])
        assert str(bad.value).startswith("rollout.sampler process: ") and "\n" not in str(bad.value)
        assert len(proc.rollout([], jobs[:1])) == 1  # the child serves on

        proc._proc.kill()
        with pytest.raises(SamplerError, match=r"exited \(code -9\)"):
            proc.rollout([], jobs)
    finally:
        t.judge.close()
        proc.close()
    assert proc._proc is None


def _rows(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _trajs(run_dir, step):
    return list(read_trajectories(run_dir / "trajectories" / f"step_{step:05d}.jsonl"))


@pytest.mark.long
def test_a_preempted_process_sampler_run_resumes_as_the_thread_sampler_runs(tmp_path):
    """Staleness 1 through a sampler process, killed after step 1 (its checkpoint holds step 2's
    batch, sampled by version 0) and resumed, equals the uninterrupted run through the in-thread
    sampler: the same episodes and policy versions, the same update metrics and final weights."""

    over = {"checkpoint_every": 1, "steps": 3, "sft_steps": 1}
    with pytest.raises(Killed):
        preempted_run(train_config(tmp_path / "p", **over, **PROC))
    state = torch.load(tmp_path / "p" / "run" / "checkpoints" / "step_00001" / "state.pt", weights_only=False)
    (ahead,) = state["presampled"]
    assert (ahead["step"], ahead["version"]) == (2, 0)
    resumed = Trainer(train_config(tmp_path / "p", **over, **PROC), progress=False)
    resumed.run(resume=True)
    assert isinstance(resumed.engine, ProcessSnapshotEngine) and resumed.engine._proc is None  # closed
    straight = Trainer(train_config(tmp_path / "t", **over, **{"rollout.staleness": 1}), progress=False)
    straight.run()
    run_p, run_t = resumed.out, straight.out
    assert_learning_signal(run_p, 2)
    for step in (1, 2, 3):
        a, b = _trajs(run_p, step), _trajs(run_t, step)
        _same_samples(a, b)
        assert [x.reward for x in a] == [x.reward for x in b]
        assert (
            {x.info["policy_version"] for x in a}
            == {x.info["policy_version"] for x in b}
            == {max(step - 2, 0)}
        )
    for a, b in zip(_rows(run_p), _rows(run_t), strict=True):
        for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "rollout/staleness"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), (a["step"], key)
    ours = resumed.model.state_dict()
    assert all(torch.allclose(v, ours[k], atol=1e-6) for k, v in straight.model.state_dict().items())


def test_sampler_process_with_the_vllm_engine_is_a_config_error(tmp_path):
    with pytest.raises(ValueError, match="sampler: process runs the hf engine"):
        train_config(tmp_path, **PROC, **{"rollout.engine": "vllm"})


def test_a_stop_ends_the_wait_for_the_child_and_the_child_with_it(tmp_path):
    """Ctrl-C or SIGTERM while the child samples: the wait for its reply ends at the next tenth of a
    second, and close() stops the child at once instead of letting it finish the rollout."""
    import threading
    import time

    from agentrl.stopping import RunInterrupted, request_stop, stops_on_signals

    t = Trainer(train_config(tmp_path, sft_steps=0, **PROC), progress=False)
    t.setup()
    proc = t.engine
    try:
        with stops_on_signals():
            jobs = t._jobs(1) * 40  # a rollout of many seconds in the child
            threading.Timer(1.0, request_stop).start()
            t0 = time.monotonic()
            with pytest.raises(RunInterrupted):
                proc.rollout([], jobs)
            waited = time.monotonic() - t0
            child = proc._proc
            t1 = time.monotonic()
            proc.close()
            assert not child.is_alive() and time.monotonic() - t1 < 5
        assert waited < 3, waited
    finally:
        proc.close()
        t.pool.shutdown()
