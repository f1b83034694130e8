"""The trainer's shape: ``train_step`` reads as its numbered phases, the rollout engine is chosen once
and synced after every update, and the checkpointed ``TrainState`` round-trips (old checkpoints too)."""

from __future__ import annotations

import inspect
import re

import pytest
import torch

from agentrl.errors import ConfigError
from agentrl.rundir import STATE
from agentrl.sampling.engines import HFEngine
from agentrl.train import Trainer
from agentrl.train.checkpoint import TrainState, config_hash, restore_run, save_checkpoint, save_run
from tests.train.learning_signal import train_config

PHASES = ["rollout", "judge", "expand", "old and reference log-probs", "advantages", "update", "sync and log"]


def test_train_step_is_at_most_80_lines_of_numbered_phases_in_order():
    source = inspect.getsource(Trainer.train_step)
    assert len(source.splitlines()) <= 80
    found = re.findall(r"#\s*(\d)\.\s*([^:\n]+)", source)
    assert [int(n) for n, _ in found] == list(range(1, 8)), found
    names = [name.strip() for _, name in found]
    assert all(n.startswith(p) for n, p in zip(names, PHASES, strict=True)), names


def test_a_steps_data_path_reads_in_three_files_of_train():
    """rollout → judge → expand → advantages → update: every call of ``train_step`` that carries the
    step's data is defined in ``trainer.py``, ``step_sampling.py`` or ``update.py``, except the rows,
    which are ``agentrl.learn.batch.build_batch`` (replay builds them with it too)."""
    from agentrl.train import trainer as trainer_module
    from agentrl.train.step_sampling import StepJudge

    source = inspect.getsource(Trainer.train_step)
    data_path = ["_rollout", "_dynamic_sampling", "_save_trajectories", "_forward_passes", "_update",
                 "_after_update", "_log_tokens"]  # fmt: skip
    where = {name: getattr(Trainer, name).__module__ for name in data_path}
    where["judge.score"] = StepJudge.score.__module__
    for name in ("build_batch", "compute_advantages"):
        where[name] = getattr(trainer_module, name).__module__
    for name in where:
        assert re.search(rf"\b{re.escape(name)}\(", source), name
    for name in re.findall(r"\bself\.(_\w+)\(", source):  # every private step of the trainer it calls
        where[name] = getattr(Trainer, name).__module__
    files = {m for m in where.values() if m.startswith("agentrl.train.")}
    assert files == {"agentrl.train.trainer", "agentrl.train.step_sampling", "agentrl.train.update"}, where
    assert set(where.values()) - files == {"agentrl.learn.batch"}, where


def _modules(seed: int) -> dict[str, tuple[torch.nn.Module, torch.optim.Optimizer | None]]:
    torch.manual_seed(seed)
    model, critic, ref = torch.nn.Linear(3, 2), torch.nn.Linear(3, 1), torch.nn.Linear(3, 2)
    opt, critic_opt = torch.optim.AdamW(model.parameters()), torch.optim.AdamW(critic.parameters())
    for _ in range(seed + 1):  # give the optimisers state that differs with the seed
        for module, o in ((model, opt), (critic, critic_opt)):
            module(torch.full((1, 3), seed + 1.0)).sum().backward()
            o.step()
    return {"model": (model, opt), "critic": (critic, critic_opt), "ref": (ref, None)}


def _equal(a: dict, b: dict) -> bool:
    return all(torch.equal(v, b[k]) for k, v in a.items())


def test_train_state_and_modules_round_trip(tmp_path):
    saved = _modules(0)
    config = {"seed": 3, "model": {"path": "tiny:"}}
    state = TrainState(7, {"last_epoch": 7, "base_lrs": [0.1]}, 0.25, config)
    path = save_run(tmp_path, state, saved)
    raw = torch.load(path / STATE, weights_only=False)
    # The keys state.pt always had (replay, explain and report read them), and the new hash.
    assert {"step", "scheduler", "kl_coef", "config", "rng", "model", "optimizer", "critic"} <= set(raw)
    assert {"critic_optimizer", "ref", "sharded", "config_hash"} <= set(raw)
    assert raw["config_hash"] == config_hash(config)
    fresh = _modules(1)
    back = restore_run(path, fresh, sharded=False)
    assert back == TrainState(7, state.scheduler, 0.25, config, False, config_hash(config))
    for name in saved:
        assert _equal(saved[name][0].state_dict(), fresh[name][0].state_dict()), name
    assert (
        fresh["model"][1].state_dict()["state"][0]["step"]
        == saved["model"][1].state_dict()["state"][0]["step"]
    )
    exp_avg = fresh["critic"][1].state_dict()["state"][0]["exp_avg"]
    assert torch.equal(exp_avg, saved["critic"][1].state_dict()["state"][0]["exp_avg"])
    with pytest.raises(ConfigError, match="written with parallelism ddp"):
        restore_run(path, _modules(2), sharded=True)


def test_a_checkpoint_from_before_train_state_still_loads(tmp_path):
    """state.pt as the trainer wrote it before ``TrainState``: no ``sharded``, no ``config_hash``."""
    saved = _modules(0)
    (model, opt), (critic, critic_opt), _ = saved.values()
    legacy = {
        "scheduler": {"last_epoch": 2},
        "kl_coef": 0.5,
        "config": {"seed": 1},
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "critic": critic.state_dict(),
        "critic_optimizer": critic_opt.state_dict(),
    }
    path = save_checkpoint(tmp_path, 2, legacy)
    fresh = _modules(1)
    fresh.pop("ref")  # an old run without a reference model
    state = restore_run(path, fresh, sharded=False)
    assert (state.step, state.kl_coef, state.sharded, state.config_hash) == (2, 0.5, False, "")
    assert _equal(model.state_dict(), fresh["model"][0].state_dict())
    assert _equal(critic.state_dict(), fresh["critic"][0].state_dict())


class _Recording:
    """The trainer's engine, with its calls recorded."""

    def __init__(self, inner: HFEngine) -> None:
        self.inner, self.calls = inner, []

    def rollout(self, envs, specs):
        self.calls.append(("rollout", len(specs)))
        return self.inner.rollout(envs, specs)

    def after_update(self, model, step):
        self.calls.append(("after_update", step, model))

    def close(self):
        self.calls.append(("close",))


def test_the_engine_is_chosen_at_setup_and_synced_after_each_update(tmp_path):
    t = Trainer(train_config(tmp_path, sft_steps=0, steps=2), progress=False)
    t.setup()
    assert isinstance(t.engine, HFEngine) and t.engine.model is t.model
    t.engine = rec = _Recording(t.engine)
    t.train_step()
    t.train_step()
    assert [c[:2] for c in rec.calls] == [
        ("rollout", 4),
        ("after_update", 1),
        ("rollout", 4),
        ("after_update", 2),
    ]
    assert all(c[2] is t.model for c in rec.calls if c[0] == "after_update")


def test_a_vllm_trainer_checks_its_sync_mode_at_setup(tmp_path):
    cfg = train_config(tmp_path, **{"rollout.engine": "vllm", "vllm.sync": "lora", "sft_steps": 0})
    with pytest.raises(ConfigError, match="lora needs model"):
        Trainer(cfg, progress=False).setup()


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")
def test_save_and_resume_restore_the_train_state(tmp_path):
    """The trainer's TrainState (step, schedule, adaptive KL coefficient) survives save → --resume."""
    over = {
        "sft_steps": 0,
        "algorithm.kl_in_reward": True,
        "algorithm.kl_target": 0.1,
        "optim.warmup_steps": 3,
    }
    t = Trainer(train_config(tmp_path, **over), progress=False)
    t.setup()
    t.step, t.models.kl_ctrl.value = 5, 0.123
    for _ in range(2):
        t.models.sched.step()
    for step in range(1, 6):  # the logged steps 1-5 a resume checks that step_00005 comes after
        t.log.step({"step": step})
    t.save()
    back = Trainer(train_config(tmp_path, **over), progress=False)
    back.setup(resume=True)
    assert back.step == 5 and back.models.kl_ctrl.value == 0.123
    assert back.models.sched.state_dict() == t.models.sched.state_dict()
    assert back.models.sched.get_last_lr() == t.models.sched.get_last_lr() != [t.cfg.optim.lr / 4]
