"""One owner of how a run samples its evaluation episodes (``agentrl.train.run_sampling``): the
trainer's evaluation, ``agentrl rollout --policy hf:RUN`` (env and resume check), and the ``hf:``
policy of the run, of its ``checkpoints/`` and of one checkpoint all sample with the same spec,
context policy and env; a retired key is a note on every path, an invalid one an error on every path."""

from __future__ import annotations

import json

import pytest

from agentrl.errors import AgentRLWarning, ConfigError
from agentrl.train import Trainer, load_hf_policy, read_run_sampling
from agentrl.train.evaluation import _engine_rollout
from agentrl.train.run_sampling import run_sampling
from tests.sampling.test_hf_policy import SAMPLING
from tests.train.learning_signal import train_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    t = Trainer(train_config(tmp_path_factory.mktemp("run"), sft_steps=0, **SAMPLING), progress=False)
    t.setup()
    t.save()
    return t


def _loop(rollout):
    return rollout.__self__.loop


def test_every_reader_samples_with_the_same(run):
    from agentrl.cli.rollout import _run_sampling

    step = next((run.out / "checkpoints").iterdir())
    evaluation = _loop(_engine_rollout(run))
    paths = [run.out, run.out / "checkpoints", step]
    policies = [_loop(load_hf_policy(p, device="cpu").rollout) for p in paths]
    for loop in policies:
        assert loop.spec == evaluation.spec and loop.context == evaluation.context
    assert evaluation.spec.temperature == 0.5 and evaluation.spec.stop_ids == run.sampling.stop_ids
    for path in paths:  # the CLI's env (the one the run trained in) and its resume parameters
        how = _run_sampling(f"hf:{path}")
        assert how.env_config == run.cfg.rollout.env_config() and how.spec == evaluation.spec
        assert how.params() == read_run_sampling(run.out).params()
    assert _run_sampling("oracle") is None and read_run_sampling(run.out / "nothing") is None


def test_a_retired_key_is_a_note_and_a_bad_value_an_error_on_every_path(run, tmp_path):
    import shutil

    from agentrl.rundir import RunDir

    copy = tmp_path / "run"
    shutil.copytree(run.out, copy)
    step = next((copy / "checkpoints").iterdir())
    config = RunDir(copy).config()  # the checkpoint's, until the run writes config.json
    config["rollout"]["concurrency"] = 8  # renamed env_workers: an older agentrl wrote it
    (copy / "config.json").write_text(json.dumps(config))
    for path in (copy, step):
        with pytest.warns(AgentRLWarning, match=r"rollout\.concurrency is no longer a setting"):
            notes = read_run_sampling(path).notes
        assert len(notes) == 1 and "rollout.concurrency is no longer a setting" in notes[0]
    config["rollout"]["temperature"] = -1
    (copy / "config.json").write_text(json.dumps(config))
    for path in (copy, step):
        with pytest.raises(ConfigError, match=r"rollout\.temperature"):
            read_run_sampling(path)
        with pytest.raises(ConfigError, match=r"rollout\.temperature"):
            load_hf_policy(path, device="cpu")


def test_the_vllm_evaluation_samples_with_the_same(tmp_path):
    """With ``rollout.engine: vllm`` the evaluation asks the run's server for episodes with the
    evaluation's loop: ``eval.temperature``, the run's stop ids, limits and context policy."""
    over = {"rollout.engine": "vllm", "vllm.base_url": "http://127.0.0.1:9/v1", "vllm.served_model": "policy"}
    t = Trainer(train_config(tmp_path, sft_steps=0, **SAMPLING, **over), progress=False)
    t.setup()
    asked = []

    class Server:
        def run_episodes(self, envs, specs, **kw):
            asked.append(kw)
            return []

    t.engine._server = Server()  # connected: nothing is synced or sampled over HTTP
    assert _engine_rollout(t)([], []) == []
    how = run_sampling(t.cfg, t.sampling)
    (kw,) = asked
    assert kw["temperature"] == 0.5 == how.spec.temperature and kw["stop_ids"] == how.spec.stop_ids
    assert kw["top_p"] == 0.9 and kw["limits"].context == how.context_policy()
