"""A GRPO run with ``rollout.engine: vllm`` against the fake server: the server is given the
warm-started weights before the first rollout and the updated weights after every update, so it
samples exactly what the HF engine would have (same trajectories, same final weights).
The fake server samples from the tiny model weights it was told to reload (no scripted policy)."""

from __future__ import annotations

import json

import pytest
import torch

from agentrl.errors import ConfigError
from agentrl.learn.models import build_tiny_model
from agentrl.sampling.vllm_engine import vllm_engine
from agentrl.train import TrainConfig, Trainer
from agentrl.trajectory import read_trajectories
from tests.policy_vllm.conftest import TINY_SPEC, base_config


def _cfg(out, **over) -> TrainConfig:
    return base_config(out, **over)


def test_vllm_engine_run_matches_the_hf_engine(tmp_path, fake, hf_run):
    # The server starts on placeholder weights (another vocabulary): it can only sample the
    # policy's tokens if the trainer's first sync reached it.
    srv = fake(model=build_tiny_model(32, TINY_SPEC, seed=9), model_dir=tmp_path / "serve")
    over = {"rollout.engine": "vllm", "vllm.base_url": srv.url + "/v1", "vllm.served_model": "policy"}
    over |= {"vllm.sync": "full", "vllm.sync_dir": str(tmp_path / "serve")}
    vllm_run = Trainer(_cfg(tmp_path / "vllm", **over), progress=False)
    vllm_run.run()
    hf_trainer, hf_out = hf_run

    sync = ["POST /collective_rpc", "POST /reset_prefix_cache"]
    assert srv.routes() == sync * 3  # the warm-started weights, then after each of the 2 updates
    assert srv.calls[0][1] == "/version"
    # Every step's generation comes after the sync that precedes it.
    paths = [p for _, p, _ in srv.calls]
    first_gen = paths.index("/v1/completions")
    assert paths[:first_gen] == ["/version", "/collective_rpc", "/reset_prefix_cache"]
    for step in (1, 2):
        a = list(read_trajectories(tmp_path / "vllm" / "trajectories" / f"step_{step:05d}.jsonl"))
        b = list(read_trajectories(hf_out / "trajectories" / f"step_{step:05d}.jsonl"))
        ta = [m.token_ids for t in a for m in t.messages if m.role == "assistant"]
        assert ta and ta == [m.token_ids for t in b for m in t.messages if m.role == "assistant"]
    rows = [json.loads(x) for x in (tmp_path / "vllm" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1.0, 2.0]
    # The server's logprobs are the trainer's own (same weights): the recomputed ones agree.
    assert all(r["actor/rollout_logprob_diff"] < 1e-4 for r in rows)
    assert all(r["actor/grad_norm"] > 0 for r in rows)  # the weights did change at every step
    for x, y in zip(
        vllm_run.model.state_dict().values(), hf_trainer.model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4)
    moved = any(
        not torch.equal(x, y)
        for x, y in zip(vllm_run.model.state_dict().values(), srv.base.state_dict().values(), strict=True)
    )
    assert not moved  # the server serves the final weights


def test_wrong_server_version_stops_the_run_with_a_clear_error(tmp_path, fake):
    srv = fake(model=build_tiny_model(32, TINY_SPEC), version="0.8.5")
    over = {"rollout.engine": "vllm", "vllm.base_url": srv.url, "vllm.sync": "none", "steps": 1}
    cfg = _cfg(tmp_path / "run", **{k: v for k, v in over.items() if k != "steps"})
    cfg.steps, cfg.sft_steps = 1, 0
    with pytest.raises(ConfigError, match=r"vLLM 0\.8\.5 is not supported.*vllm>=0\.10\.2"):
        Trainer(cfg, progress=False).run()


def test_lora_sync_mode_needs_a_lora_policy(tmp_path, fake):
    srv = fake(model=build_tiny_model(32, TINY_SPEC))
    cfg = _cfg(tmp_path / "run", **{"rollout.engine": "vllm", "vllm.base_url": srv.url, "vllm.sync": "lora"})
    cfg.sft_steps = 0
    with pytest.raises(ConfigError, match="lora_rank"):
        Trainer(cfg, progress=False).run()


def test_the_gpu_example_config_is_valid():
    from pathlib import Path

    from agentrl.train import load_train_config

    cfg = load_train_config(Path(__file__).parents[2] / "examples" / "gpu" / "vllm-grpo.yaml")
    assert cfg.rollout.engine == "vllm" and cfg.vllm.sync == "full" and cfg.vllm.served_model == "policy"


def test_lora_run_hot_swaps_the_adapter_after_each_update(tmp_path, fake):
    cfg = _cfg(tmp_path / "run", **{"rollout.engine": "vllm", "vllm.sync": "lora", "model.lora_rank": 4})
    cfg.steps = 1
    t = Trainer(cfg, progress=False)
    t.setup()
    # The server serves the same base model the trainer built (same spec, vocabulary and seed).
    srv = fake(model=build_tiny_model(len(t.tokenizer), TINY_SPEC, seed=cfg.seed), served_name=cfg.model.path)
    cfg.vllm.base_url = srv.url
    t.warm_start()
    m = t.train_step()
    assert srv.routes() == [
        "POST /v1/load_lora_adapter",
        "POST /v1/load_lora_adapter",
        "POST /v1/unload_lora_adapter",
    ]
    gens = [b["model"] for _, p, b in srv.calls if p == "/v1/completions"]
    assert gens and set(gens) == {"agentrl-policy-step00000"}  # the adapter loaded before the rollout
    assert m["actor/rollout_logprob_diff"] < 1e-4  # the served adapter is the trainer's
    assert list(srv.adapters) == ["agentrl-policy-step00001"] and vllm_engine(t).served_model in srv.adapters
