"""A SIGTERM stops a run within its phase, not when the phase ends: between two decoded tokens of
a sampling call, between an update's micro-batches, between an episode's turns
(``agentrl.stopping``). The run then ends as a Ctrl-C ends it: a summary marked interrupted, the
step in progress not logged (``--resume`` redoes it; tests/robustness/test_run_survives.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import traceback

import pytest
import torch

import agentrl.sampling.generate as generate
import agentrl.train.trainer as trainer_module
from agentrl.env import ResearchEnv
from agentrl.rollout.episode import run_episode
from agentrl.stopping import RunInterrupted, request_stop, stops_on_signals
from agentrl.train import Trainer
from agentrl.trajectory import Message
from tests.integrations.helpers import ENV_CONFIG
from tests.rollout.test_episode import _specs
from tests.train.learning_signal import train_config


def _frames(e: BaseException) -> list[str]:
    return [f.name for f in traceback.extract_tb(e.__traceback__)]


def _run(tmp_path, monkeypatch, name, wrap):
    """Run a 1-step tiny run whose ``name`` (in its module) is replaced by ``wrap(original)``; the
    run must stop with RunInterrupted(SIGTERM). Returns the run directory."""
    module, attr = name
    monkeypatch.setattr(module, attr, wrap(getattr(module, attr)))
    t = Trainer(train_config(tmp_path, steps=1, sft_steps=0), progress=False)
    with pytest.raises(RunInterrupted) as e:
        t.run()
    assert e.value.signal == "SIGTERM"
    return tmp_path / "run"


def _logged_steps(run) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_sigterm_stops_a_sampling_call_at_the_next_token(tmp_path, monkeypatch):
    calls = {"n": 0, "after": 0, "sent": False}

    def wrap(process):
        def counted(*a, **kw):
            calls["n"] += 1
            if calls["sent"]:
                calls["after"] += 1
            elif calls["n"] == 3:  # inside step 1's first sampling call
                os.kill(os.getpid(), signal.SIGTERM)
                calls["sent"] = True
            return process(*a, **kw)

        return counted

    seen = {}

    def wrap_sample(sample):
        def caught(*a, **kw):
            try:
                return sample(*a, **kw)
            except RunInterrupted as e:
                seen["frames"] = _frames(e)
                raise

        return caught

    monkeypatch.setattr(generate, "_sample", wrap_sample(generate._sample))
    run = _run(tmp_path, monkeypatch, (generate, "_process"), wrap)
    assert calls["sent"] and calls["after"] == 0  # not one more token decoded
    assert seen["frames"][-2:] == ["_sample", "stop_point"]  # the stop point between tokens
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["signal"] == "SIGTERM"
    assert not (run / "metrics.jsonl").exists() or _logged_steps(run) == []  # step 1 not logged


def test_a_sigterm_stops_an_update_before_its_next_micro_batch(tmp_path, monkeypatch):
    seen = {}

    def wrap(update_actor):
        def stopped(model, *a, **kw):
            if seen:
                return update_actor(model, *a, **kw)
            before = [p.detach().clone() for p in model.parameters()]
            os.kill(os.getpid(), signal.SIGTERM)
            try:
                return update_actor(model, *a, **kw)
            except RunInterrupted as e:
                seen["frames"] = _frames(e)
                seen["unchanged"] = all(
                    torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True)
                )
                raise

        return stopped

    run = _run(tmp_path, monkeypatch, (trainer_module, "update_actor"), wrap)
    # raised by the stop point between micro-batches, before any optimiser step (not by the grace timer)
    assert seen["frames"][-2:] == ["micro_batches", "stop_point"] and seen["unchanged"]
    assert not (run / "metrics.jsonl").exists() or _logged_steps(run) == []


def test_a_stop_ends_an_episode_before_its_next_turn():
    spec = _specs(1)[0]
    turns = []

    async def gen(req):  # type: ignore[no-untyped-def]
        turns.append(req.turn)
        request_stop()  # as the SIGTERM handler does, during turn 0
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "search", "arguments": '{"query": "revenue"}'},
        }
        return Message(role="assistant", content="", tool_calls=[call])

    with stops_on_signals(), pytest.raises(RunInterrupted) as e:
        asyncio.run(run_episode(ResearchEnv(ENV_CONFIG), spec, gen))
    assert turns == [0] and _frames(e.value)[-2:] == ["run_episode", "stop_point"]


def test_a_stop_during_a_fresh_runs_setup_says_to_run_it_again(tmp_path, monkeypatch):
    """The setup of a fresh run removes what it began when it fails or is stopped: the line must not
    send the user to --resume (which then said the directory does not exist)."""

    def wrap(collect):
        def stopped(*a, **kw):
            os.kill(os.getpid(), signal.SIGTERM)
            return collect(*a, **kw)

        return stopped

    monkeypatch.setattr(
        trainer_module, "collect_oracle_trajectories", wrap(trainer_module.collect_oracle_trajectories)
    )
    t = Trainer(train_config(tmp_path, steps=1, sft_steps=2), progress=False)
    with pytest.raises(RunInterrupted) as e:
        t.run()
    assert str(e.value).endswith("stopped during its setup, so nothing was kept: run the same command again")
    assert not (tmp_path / "run").exists()
