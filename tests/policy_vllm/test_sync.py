"""Weight sync against the fake server: the routes are called in order, and afterwards the server
samples from exactly the trainer's weights (full reload, LoRA hot-swap, NCCL broadcast)."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from agentrl.errors import ConfigError
from agentrl.learn.models import build_tiny_model
from agentrl.sampling.generate import sample_batch
from agentrl.sampling.vllm_client import VLLMClient, VLLMError
from agentrl.sampling.vllm_sync import WeightSync
from tests.policy_vllm.conftest import TINY_SPEC


def _served_sample(url, name, prompt, seed=4):
    async def go():
        async with VLLMClient(url, name) as c:
            return await c.generate(prompt, max_tokens=8, seed=seed)

    return asyncio.run(go())


def _local_sample(model, prompt, seed=4):
    return sample_batch(model, [prompt], seeds=[seed], stop_ids=set(), pad_id=0, max_new_tokens=8)[0]


def _nudge(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.5 * torch.randn(p.shape, generator=gen))


def test_full_sync_saves_then_reloads_and_resets_the_prefix_cache(fake, tok, tmp_path):
    trainer_model = build_tiny_model(len(tok), TINY_SPEC, seed=1)
    placeholder = build_tiny_model(len(tok), TINY_SPEC, seed=2)
    srv = fake(model=placeholder, model_dir=tmp_path / "serve")
    sync = WeightSync("full", srv.url + "/v1", "policy", sync_dir=tmp_path / "serve", tokenizer=tok)
    prompt = tok.encode("search the filings")
    for step in (0, 1):
        _nudge(trainer_model, step)
        assert sync.push(trainer_model, step) == "policy"
        got = _served_sample(srv.url, "policy", prompt)
        want = _local_sample(trainer_model, prompt)
        assert got.token_ids == want.token_ids and got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    assert srv.routes() == ["POST /collective_rpc", "POST /reset_prefix_cache"] * 2
    assert next(b for _, p, b in srv.calls if p == "/collective_rpc") == {"method": "reload_weights"}
    assert (tmp_path / "serve" / "model.safetensors").exists() and (
        tmp_path / "serve" / "tokenizer.json"
    ).exists()
    sync.close()


def test_lora_sync_loads_a_new_adapter_each_step_and_unloads_the_old(fake, tok, tmp_path):
    from peft import LoraConfig, get_peft_model

    base = build_tiny_model(len(tok), TINY_SPEC, seed=1)
    srv = fake(model=copy.deepcopy(base), served_name="base")
    policy = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    sync = WeightSync("lora", srv.url, "base", sync_dir=tmp_path / "sync")
    prompt = tok.encode("open the page")
    names = []
    for step in (0, 1, 2):
        _nudge(policy, 10 + step)  # only the adapters are trainable
        names.append(sync.push(policy, step))
        got = _served_sample(srv.url, names[-1], prompt)
        want = _local_sample(policy.eval(), prompt)
        assert got.token_ids == want.token_ids and got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    assert names == [f"agentrl-policy-step{s:05d}" for s in (0, 1, 2)]
    assert srv.routes() == [
        "POST /v1/load_lora_adapter",
        "POST /v1/load_lora_adapter",
        "POST /v1/unload_lora_adapter",
        "POST /v1/load_lora_adapter",
        "POST /v1/unload_lora_adapter",
    ]
    loads = [b for _, p, b in srv.calls if p == "/v1/load_lora_adapter"]
    assert loads[1] == {
        "lora_name": names[1],
        "lora_path": str((tmp_path / "sync" / "lora-step00001").resolve()),
    }
    assert list(srv.adapters) == [names[2]]
    assert sorted(p.name for p in (tmp_path / "sync").iterdir()) == ["lora-step00002"]  # old adapters removed


class QueueTransport:
    """Stands in for the NCCL data plane: what is "broadcast" lands in the fake server's inbox."""

    def __init__(self, server):
        self.server = server
        self.inits = []

    def init(self, master_address, master_port, world_size):
        self.inits.append((master_address, master_port, world_size))

    def broadcast(self, named_tensors):
        self.server.nccl_inbox.put({n: t.clone() for n, t in named_tensors})


@pytest.mark.parametrize("start_finish", [True, False])
def test_nccl_sync_request_sequence_and_weights(fake, tok, start_finish):
    trainer_model = build_tiny_model(len(tok), TINY_SPEC, seed=1)
    srv = fake(model=build_tiny_model(len(tok), TINY_SPEC, seed=2), nccl_start_finish=start_finish)
    transport = QueueTransport(srv)
    sync = WeightSync("nccl", srv.url, "policy", nccl_master=("10.0.0.5", 29600), nccl_transport=transport)
    prompt = tok.encode("search")
    for step in (1, 2):
        _nudge(trainer_model, step)
        sync.push(trainer_model, step)
        assert (
            _served_sample(srv.url, "policy", prompt).token_ids
            == _local_sample(trainer_model, prompt).token_ids
        )
    once = ["GET /get_world_size", "POST /init_weight_transfer_engine"]
    each = (
        ["POST /start_weight_update", "POST /update_weights", "POST /finish_weight_update"]
        if start_finish
        else ["POST /start_weight_update", "POST /update_weights", "POST /reset_prefix_cache"]
    )
    assert srv.routes() == once + each + each
    assert transport.inits == [("10.0.0.5", 29600, 2)]  # one vLLM worker + the trainer
    init = next(b for _, p, b in srv.calls if p == "/init_weight_transfer_engine")
    assert init == {
        "init_info": {"master_address": "10.0.0.5", "master_port": 29600, "rank_offset": 1, "world_size": 2}
    }
    info = next(b for _, p, b in srv.calls if p == "/update_weights")["update_info"]
    params = dict(trainer_model.named_parameters())
    assert info["names"] == list(params) and info["packed"] is True
    assert info["dtype_names"] == ["float32"] * len(params)
    assert info["shapes"] == [list(p.shape) for p in params.values()]
    if start_finish:
        finishes = [b for _, p, b in srv.calls if p == "/finish_weight_update"]
        assert finishes == [{"weight_version": "1"}, {"weight_version": "2"}]


def test_missing_routes_name_the_server_flag(fake, tok, tmp_path):
    m = build_tiny_model(len(tok), TINY_SPEC, seed=1)
    srv = fake(model=m, dev_mode=False, lora_updating=False)
    with pytest.raises(VLLMError, match="VLLM_SERVER_DEV_MODE=1"):
        WeightSync("full", srv.url, "policy", sync_dir=tmp_path / "a").push(m, 1)
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(copy.deepcopy(m), LoraConfig(r=2, target_modules=["q_proj"]))
    with pytest.raises(VLLMError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING"):
        WeightSync("lora", srv.url, "policy", sync_dir=tmp_path / "b").push(lora, 1)
    with pytest.raises(ConfigError, match="sync: lora"):
        WeightSync("full", srv.url, "policy", sync_dir=tmp_path / "c").push(lora, 1)
    with pytest.raises(ConfigError, match="lora_rank"):
        WeightSync("lora", srv.url, "policy", sync_dir=tmp_path / "d").push(m, 1)
    with pytest.raises(ConfigError, match="sync_dir"):
        WeightSync("full", srv.url, "policy")


def test_none_makes_no_call(fake, tok):
    m = build_tiny_model(len(tok), TINY_SPEC, seed=1)
    srv = fake(model=m)
    assert WeightSync("none", srv.url, "policy").push(m, 3) == "policy"
    assert srv.calls == []


def test_a_resumed_lora_run_replaces_the_adapter_of_the_same_version(fake, tok, tmp_path):
    from peft import LoraConfig, get_peft_model

    base = build_tiny_model(len(tok), TINY_SPEC, seed=1)
    srv = fake(model=copy.deepcopy(base), served_name="base")
    policy = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    WeightSync("lora", srv.url, "base", sync_dir=tmp_path / "a").push(policy, 3)
    _nudge(policy, 1)
    # A new trainer process (resumed at step 3) pushes the same version again.
    name = WeightSync("lora", srv.url, "base", sync_dir=tmp_path / "b").push(policy, 3)
    assert srv.routes()[1:] == [
        "POST /v1/load_lora_adapter",
        "POST /v1/unload_lora_adapter",
        "POST /v1/load_lora_adapter",
    ]
    prompt = tok.encode("a b")
    assert _served_sample(srv.url, name, prompt).token_ids == _local_sample(policy.eval(), prompt).token_ids
