"""``forward_context``: how every forward pass (sampler, trainer, critic, memory probe) runs on its
device. On a GPU it keeps SDPA off cuDNN's attention backend, which builds a graph for each new
sequence length (a decode step's cache grows a token a step): an H200 rollout spent 17 ms a call
there. CUDA cannot run here, so a stand-in model whose parameter says ``is_cuda`` drives the branch;
the flags it sets are the process's SDPA flags, which exist on a CPU build too."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch

from agentrl.learn.models import GPU_ATTENTION, forward_context
from agentrl.sampling import generate


class _OnGPU(torch.nn.Module):
    """A module whose first parameter reports a CUDA device (nothing runs on it)."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self._p = SimpleNamespace(is_cuda=True, dtype=dtype)

    def parameters(self, recurse: bool = True):  # type: ignore[override]
        yield self._p


def _flags() -> dict[str, bool]:
    b = torch.backends.cuda
    return {"cudnn": b.cudnn_sdp_enabled(), "flash": b.flash_sdp_enabled(), "efficient": b.mem_efficient_sdp_enabled(), "math": b.math_sdp_enabled()}  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_a_gpu_sdpa_leaves_out_cudnn_and_the_flags_come_back(dtype: torch.dtype) -> None:
    before = _flags()
    assert before["cudnn"]  # torch's default: the test would say nothing otherwise
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # autocast on a CPU build: "CUDA is not available"
        with forward_context(_OnGPU(dtype)):
            inside = _flags()
    assert inside == {"cudnn": False, "flash": True, "efficient": True, "math": True}
    assert GPU_ATTENTION[-1] == "MATH"  # a call no fused kernel takes still runs
    assert _flags() == before


def test_on_a_cpu_nothing_changes() -> None:
    model = torch.nn.Linear(2, 2)
    before = _flags()
    with forward_context(model):
        assert _flags() == before and not torch.is_autocast_enabled("cpu")


def test_the_sampler_decodes_inside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrl.learn.models import build_tiny_model

    entered: list[torch.nn.Module] = []
    real = generate.forward_context

    def spy(model: torch.nn.Module):  # type: ignore[no-untyped-def]
        entered.append(model)
        return real(model)

    monkeypatch.setattr(generate, "forward_context", spy)
    model = build_tiny_model(64, "tiny:layers=1,hidden=16,heads=2,kv_heads=1")
    generate.sample_batch(model, [[1, 2, 3]], seeds=[0], stop_ids=set(), pad_id=0, max_new_tokens=2)
    assert entered == [model]
