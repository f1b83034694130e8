"""Two FSDP2 ranks (gloo, torchrun) with ``rollout.engine: vllm``: rank 0 gathers the sharded policy
and the server reloads exactly the weights a single-process HF-engine run has after the same step (the session's ``hf_run``)."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import yaml

from agentrl.learn.models import build_tiny_model
from agentrl.trajectory import read_trajectories
from tests.policy_vllm.conftest import BASE, TINY_SPEC
from tests.train.test_distributed import _free_port, _run


@pytest.mark.slow
def test_fsdp_ranks_sync_the_gathered_policy(tmp_path, fake, hf_run):
    srv = fake(model=build_tiny_model(32, TINY_SPEC, seed=9), model_dir=tmp_path / "serve")
    cfg = json.loads(json.dumps(BASE))
    cfg["steps"] = 1
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    root = str(tmp_path)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2"]
    torchrun += ["--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "-m", "agentrl.train"]
    sets = {
        "output_dir": f"{root}/fsdp",
        "parallelism": "fsdp",
        "rollout.engine": "vllm",
        "vllm.base_url": srv.url,
        "vllm.served_model": "policy",
        "vllm.sync_dir": str(tmp_path / "serve"),
    }
    _run(
        [*torchrun, str(path), "--no-progress", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")]],
        root,
    )

    assert srv.routes() == ["POST /collective_rpc", "POST /reset_prefix_cache"] * 2  # start, after the update
    one = list(read_trajectories(hf_run[1] / "trajectories" / "step_00001.jsonl"))
    two = list(read_trajectories(tmp_path / "fsdp" / "trajectories" / "step_00001.jsonl"))
    ids = lambda ts: sorted((t.id, [m.token_ids for m in t.messages if m.role == "assistant"]) for t in ts)  # noqa: E731
    assert ids(one) == ids(two)
    final = torch.load(hf_run[1] / "checkpoints" / "step_00001" / "state.pt", weights_only=False)["model"]
    served = srv.base.state_dict()
    for name, value in final.items():
        torch.testing.assert_close(served[name], value, atol=1e-5, rtol=1e-4)
