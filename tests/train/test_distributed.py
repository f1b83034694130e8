"""Data parallelism on CPU: 2 gloo processes under torchrun (DDP, and FSDP2 with sharded checkpoints)
take the same step as one process."""

import json
import socket
import subprocess
import sys

import pytest
import torch
import yaml

from agentrl.trajectory import read_trajectories
from tests.train.test_trainer import TINY


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_two_processes_equal_one(tmp_path, algo):
    cfg = json.loads(json.dumps(TINY))
    cfg["algorithm"].update(
        {
            "name": algo,
            "mini_batch_size": 4,
            "entropy_coef": 0.01,
        }  # entropy: a gradient even if every reward is 0
    )  # one optimiser step over all 4 trajectories
    cfg.update({"steps": 1, "sft_steps": 1})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    root = str(tmp_path)
    _run(
        [
            sys.executable,
            "-m",
            "agentrl.train",
            str(path),
            "--no-progress",
            "--set",
            f"output_dir={root}/one",
        ],
        root,
    )
    for run, parallelism in (("two", "ddp"), ("fsdp", "fsdp")):
        _run(
            [
                sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
                "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
                "-m", "agentrl.train", str(path), "--no-progress", "--set", f"output_dir={root}/{run}",
                "--set", f"parallelism={parallelism}",
            ],
            root,
        )  # fmt: skip
    one = torch.load(tmp_path / "one/checkpoints/step_00001/state.pt", weights_only=False)
    two = torch.load(tmp_path / "two/checkpoints/step_00001/state.pt", weights_only=False)
    for key in one["model"]:
        assert torch.allclose(one["model"][key], two["model"][key], atol=1e-5, rtol=1e-4), key
    for key in ("model", "critic") if algo == "ppo" else ("model",):
        assert one[key].keys() == two[key].keys()
    assert one["optimizer"]["state"], "the step took no optimiser step"
    m1 = json.loads((tmp_path / "one/metrics.jsonl").read_text().splitlines()[0])
    m2 = json.loads((tmp_path / "two/metrics.jsonl").read_text().splitlines()[0])
    assert m1["critic/score/mean"] == pytest.approx(m2["critic/score/mean"])
    # Loss metrics are reduced over ranks to the mini-batch's value, not averaged shares of it.
    for key in ("actor/entropy", "actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl"):
        assert m1[key] == pytest.approx(m2[key], rel=1e-4, abs=1e-7), key

    # FSDP: the shards of every rank, gathered from the sharded checkpoint, are the same weights.
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    ckpt = tmp_path / "fsdp/checkpoints/step_00001"
    assert torch.load(ckpt / "state.pt", weights_only=False)["sharded"] is True
    shards = sorted((ckpt / "sharded").glob("*.distcp"))
    assert len(shards) == 2 and all(p.stat().st_size > 0 for p in shards)  # each rank wrote its own
    dcp_to_torch_save(ckpt / "sharded", tmp_path / "fsdp_full.pt")
    full = torch.load(tmp_path / "fsdp_full.pt", weights_only=False)
    for name in ("model", "critic") if algo == "ppo" else ("model",):
        assert full[name].keys() == one[name].keys(), name
        for key, value in one[name].items():
            assert torch.allclose(value, full[name][key], atol=1e-5, rtol=1e-4), (name, key)
    assert full["model_optimizer"]["state"], "the FSDP step took no optimiser step"
    m3 = json.loads((tmp_path / "fsdp/metrics.jsonl").read_text().splitlines()[0])
    assert m1["critic/score/mean"] == pytest.approx(m3["critic/score/mean"])
    assert m1["actor/pg_loss"] == pytest.approx(m3["actor/pg_loss"], abs=1e-5)
    assert m1["actor/grad_norm"] == pytest.approx(m3["actor/grad_norm"], rel=1e-4)
    assert m1["actor/entropy"] == pytest.approx(m3["actor/entropy"], rel=1e-4)
    if algo == "ppo":
        assert m1["critic/vf_loss"] == pytest.approx(m3["critic/vf_loss"], rel=1e-4, abs=1e-7)
        # explain/replay --critic rebuild the critic from the shards
        from agentrl.replay.critic import load_critic

        critic = load_critic(tmp_path / "fsdp")
        for key, value in critic.state_dict().items():
            assert torch.allclose(value, one["critic"][key], atol=1e-5, rtol=1e-4), key

    # The same episodes, token for token, whichever rank ran them; the logprobs agree to float
    # precision (a different batch composition changes the summation order).
    def episodes(run):
        trajs = read_trajectories(tmp_path / run / "trajectories/step_00001.jsonl")
        return {t.id: t for t in trajs}

    e1, e2 = episodes("one"), episodes("two")
    assert e1.keys() == e2.keys()
    for key, a in e1.items():
        b = e2[key]
        assert [(m.role, m.content, m.token_ids) for m in a.messages] == [
            (m.role, m.content, m.token_ids) for m in b.messages
        ]
        for ma, mb in zip(a.messages, b.messages, strict=True):
            if ma.logprobs:
                assert ma.logprobs == pytest.approx(mb.logprobs, abs=1e-5)
        assert a.reward.total == b.reward.total


@pytest.mark.slow
def test_fsdp_resume_equals_single_process_resume(tmp_path):
    """A sharded checkpoint resumes: one more step from it under FSDP equals one more step from the
    single-process checkpoint of the same first step."""
    cfg = json.loads(json.dumps(TINY))
    cfg["algorithm"].update({"name": "grpo", "mini_batch_size": 4, "entropy_coef": 0.01})
    cfg.update({"steps": 1, "sft_steps": 1})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    root = str(tmp_path)
    torchrun = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1",
    ]  # fmt: skip
    single = [sys.executable, "-m", "agentrl.train", str(path), "--no-progress"]
    _run([*single, "--set", f"output_dir={root}/one"], root)
    _run([*single, "--resume", "--set", f"output_dir={root}/one", "--set", "steps=2"], root)
    sharded = ["-m", "agentrl.train", str(path), "--no-progress", "--set", "parallelism=fsdp"]
    out = ["--set", f"output_dir={root}/fsdp"]
    _run([*torchrun, "--master_port", str(_free_port()), *sharded, *out], root)
    _run(
        [*torchrun, "--master_port", str(_free_port()), *sharded, *out, "--resume", "--set", "steps=2"], root
    )

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    one = torch.load(tmp_path / "one/checkpoints/step_00002/state.pt", weights_only=False)
    dcp_to_torch_save(tmp_path / "fsdp/checkpoints/step_00002/sharded", tmp_path / "full.pt")
    full = torch.load(tmp_path / "full.pt", weights_only=False)
    for key, value in one["model"].items():
        assert torch.allclose(value, full["model"][key], atol=1e-5, rtol=1e-4), key
    rows = [json.loads(line) for line in (tmp_path / "fsdp/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1.0, 2.0]


@pytest.mark.slow
def test_fsdp_with_lora_equals_single_process(tmp_path):
    """LoRA under FSDP2: frozen base and trainable adapters sharded together; the base model (adapters
    disabled) is the KL reference; one step equals the single-process step."""
    cfg = json.loads(json.dumps(TINY))
    cfg["algorithm"].update({"name": "grpo", "mini_batch_size": 4, "entropy_coef": 0.01, "kl_loss_coef": 0.1})
    cfg["model"]["lora_rank"] = 4
    cfg.update({"steps": 1, "sft_steps": 1})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    root = str(tmp_path)
    _run(
        [
            sys.executable,
            "-m",
            "agentrl.train",
            str(path),
            "--no-progress",
            "--set",
            f"output_dir={root}/one",
        ],
        root,
    )
    _run(
        [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
            "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
            "-m", "agentrl.train", str(path), "--no-progress", "--set", f"output_dir={root}/fsdp",
            "--set", "parallelism=fsdp",
        ],
        root,
    )  # fmt: skip
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    one = torch.load(tmp_path / "one/checkpoints/step_00001/state.pt", weights_only=False)
    dcp_to_torch_save(tmp_path / "fsdp/checkpoints/step_00001/sharded", tmp_path / "full.pt")
    full = torch.load(tmp_path / "full.pt", weights_only=False)
    assert full["model"].keys() == one["model"].keys()
    adapters = [k for k in one["model"] if "lora_B" in k]
    assert adapters and any(one["model"][k].abs().sum() > 0 for k in adapters)  # the adapters moved
    for key, value in one["model"].items():
        assert torch.allclose(value, full["model"][key], atol=1e-5, rtol=1e-4), key
    m1 = json.loads((tmp_path / "one/metrics.jsonl").read_text().splitlines()[0])
    m2 = json.loads((tmp_path / "fsdp/metrics.jsonl").read_text().splitlines()[0])
    for key in ("actor/kl_loss", "actor/entropy", "actor/grad_norm"):
        assert m1[key] == pytest.approx(m2[key], rel=1e-4, abs=1e-9), key
