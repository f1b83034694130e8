"""FSDP2 over gloo refuses parameters off the CPU (DTensor's gathers crash there: the GPU kit's
``ranks`` section measured a SIGSEGV on an H200), and shards CPU parameters as before."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
from torch import nn

from agentrl.train.fsdp import shard_model


@pytest.fixture
def gloo_group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_gloo_refuses_device_parameters(gloo_group):
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    with pytest.raises(RuntimeError, match="FSDP2 over gloo needs the parameters on the CPU, not on meta"):
        shard_model(model)


def test_gloo_shards_cpu_parameters(gloo_group):
    from torch.distributed.tensor import DTensor

    model = shard_model(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)))
    assert all(isinstance(p, DTensor) for p in model.parameters())
    model(torch.ones(3, 4)).sum().backward()
    norm = torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)
    assert torch.isfinite(norm.full_tensor())
