"""Data parallelism on CPU: 2 gloo processes under torchrun (DDP, and FSDP2 with sharded checkpoints)
take the same step as one process. The runs score with ``learning_signal``'s rubric, so the step has
non-zero advantages, losses and gradients to agree on."""

import json
import shutil
import socket
import subprocess
import sys

import pytest
import torch
import yaml

from agentrl.trajectory import read_trajectories
from tests.train.learning_signal import TINY, assert_learning_signal


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def _config(tmp_path, algorithm: dict, **top) -> str:
    """The tiny trainer config, one step over all 4 trajectories; no entropy bonus, so the gradient
    comes from the rewards alone."""
    cfg = json.loads(json.dumps(TINY))
    # Old log-probs recomputed by the trainer: the sampler's float noise (~1e-7, which depends on
    # how the prefill batches rows, one process or two) must not enter the update compared here.
    cfg["algorithm"].update({"mini_batch_size": 4, "recompute_old_logprobs": "always", **algorithm})
    cfg.update({"steps": 1, "sft_steps": 1, **top})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _train(tmp_path, cfg: str, out: str, *extra: str, ranks: int = 1) -> None:
    """``agentrl.train`` in one process, or under torchrun with ``ranks`` gloo processes."""
    launcher = [sys.executable]
    if ranks > 1:
        launcher += [
            "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(ranks),
            "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
        ]  # fmt: skip
    args = ["-m", "agentrl.train", cfg, "--no-progress", "--set", f"output_dir={tmp_path / out}", *extra]
    _run([*launcher, *args], str(tmp_path))


def _state(tmp_path, out: str, step: int = 1) -> dict:
    return torch.load(tmp_path / out / f"checkpoints/step_{step:05d}/state.pt", weights_only=False)


def _gathered(tmp_path, out: str, step: int = 1) -> dict:
    """An FSDP run's sharded checkpoint as one plain state dict."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    full = tmp_path / f"{out}_full_{step}.pt"
    dcp_to_torch_save(tmp_path / out / f"checkpoints/step_{step:05d}/sharded", full)
    return torch.load(full, weights_only=False)


def _metrics(tmp_path, out: str) -> dict:
    return json.loads((tmp_path / out / "metrics.jsonl").read_text().splitlines()[0])


def _assert_close(a: dict, b: dict, what: str) -> None:
    assert a.keys() == b.keys(), what
    for key, value in a.items():
        assert torch.allclose(value, b[key], atol=1e-5, rtol=1e-4), (what, key)


def _assert_stepped(optimizer_state: dict, what: str) -> None:
    """The optimiser took a step on a non-zero gradient: Adam's first moments exist and are not all
    0 (a step with a zero gradient is skipped and leaves no state)."""
    moments = []

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "exp_avg" and isinstance(v, torch.Tensor):
                    moments.append(v)
                else:
                    walk(v)

    walk(optimizer_state)
    assert moments and any(m.abs().max() > 0 for m in moments), what


def _assert_signal(m: dict, algo: str, what: str) -> None:
    """A non-zero policy gradient in a step's metrics (and, for PPO, a non-zero value loss and critic
    gradient). Not pg_loss: on-policy over one mini-batch it is −mean(A), 0 up to rounding for
    whitened (PPO) or group-centred advantages over equally long samples (GRPO)."""
    assert m["actor/grad_norm"] > 1e-6, what
    if algo == "ppo":
        assert m["critic/vf_loss"] > 0 and m["critic/grad_norm"] > 0, what


def _assert_critic_moved(critic: dict, what: str) -> None:
    """The value head starts at exactly 0 (``ValueModel``): after an update on non-zero returns it is not."""
    assert critic["head.weight"].abs().max() > 0 and critic["head.bias"].abs().max() > 0, what


@pytest.fixture(scope="module")
def grpo_runs(tmp_path_factory):
    """The GRPO config's single-process and FSDP runs, trained once for the tests that read them
    (each test works on its own copy)."""
    root = tmp_path_factory.mktemp("grpo-runs")
    cfg = _config(root, {"name": "grpo"})
    _train(root, cfg, "one")
    _train(root, cfg, "fsdp", "--set", "parallelism=fsdp", ranks=2)
    return root


def _one_and_fsdp(request, tmp_path, cfg: str, algo: str) -> None:
    """``one`` and ``fsdp`` runs of ``cfg`` in ``tmp_path``: copies of the module's GRPO runs, or trained."""
    if algo == "grpo":
        base = request.getfixturevalue("grpo_runs")
        assert (base / "cfg.yaml").read_text() == (tmp_path / "cfg.yaml").read_text()
        for run in ("one", "fsdp"):
            shutil.copytree(base / run, tmp_path / run)
        return
    _train(tmp_path, cfg, "one")
    _train(tmp_path, cfg, "fsdp", "--set", "parallelism=fsdp", ranks=2)


@pytest.mark.slow
@pytest.mark.xdist_group("grpo_runs")  # under pytest-xdist --dist loadgroup, one worker trains them once
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_two_processes_equal_one(request, tmp_path, algo):
    cfg = _config(tmp_path, {"name": algo})
    _one_and_fsdp(request, tmp_path, cfg, algo)
    _train(tmp_path, cfg, "two", "--set", "parallelism=ddp", ranks=2)
    for run in ("one", "two", "fsdp"):
        assert_learning_signal(tmp_path / run, 1)
    one, two = _state(tmp_path, "one"), _state(tmp_path, "two")
    for name in ("model", "critic") if algo == "ppo" else ("model",):
        _assert_close(one[name], two[name], f"ddp {name}")
    _assert_stepped(one["optimizer"], "the step took no optimiser step")
    if algo == "ppo":
        _assert_stepped(one["critic_optimizer"], "the critic took no optimiser step")
        _assert_critic_moved(one["critic"], "the critic did not move")
    m1, m2 = _metrics(tmp_path, "one"), _metrics(tmp_path, "two")
    _assert_signal(m1, algo, "one process")
    assert m1["critic/score/mean"] == pytest.approx(m2["critic/score/mean"])
    # Loss metrics are reduced over ranks to the mini-batch's value, not averaged shares of it.
    for key in ("actor/entropy", "actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl") + (
        ("critic/vf_loss", "critic/grad_norm") if algo == "ppo" else ()
    ):
        # abs 1e-6: pg_loss is a mean of O(1) terms that cancel to ~1e-7, summed in another order
        # on two ranks (float32: a few 1e-7); the weights are compared above, and entropy, KL and
        # the gradient norm are far from 0
        assert m1[key] == pytest.approx(m2[key], rel=1e-4, abs=1e-6), key

    # FSDP: each rank wrote its own shards; gathered, they are the single-process weights.
    ckpt = tmp_path / "fsdp/checkpoints/step_00001"
    assert _state(tmp_path, "fsdp")["sharded"] is True
    shards = sorted((ckpt / "sharded").glob("*.distcp"))
    assert len(shards) == 2 and all(p.stat().st_size > 0 for p in shards)
    full = _gathered(tmp_path, "fsdp")
    for name in ("model", "critic") if algo == "ppo" else ("model",):
        _assert_close(one[name], full[name], f"fsdp {name}")
    _assert_stepped(full["model_optimizer"], "the FSDP step took no optimiser step")
    if algo == "ppo":
        _assert_critic_moved(full["critic"], "the FSDP critic did not move")
    m3 = _metrics(tmp_path, "fsdp")
    _assert_signal(m3, algo, "fsdp")
    assert m1["critic/score/mean"] == pytest.approx(m3["critic/score/mean"])
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy") + (
        ("critic/vf_loss", "critic/grad_norm") if algo == "ppo" else ()
    ):
        assert m1[key] == pytest.approx(m3[key], rel=1e-4, abs=1e-6), key
    if algo == "ppo":  # explain/replay --critic rebuild the critic from the shards
        from agentrl.learn.critic import load_critic

        _assert_close(load_critic(tmp_path / "fsdp").state_dict(), one["critic"], "load_critic")

    # The same episodes, token for token, whichever rank ran them; the logprobs agree to float
    # precision, relative to their size (a different batch composition changes the summation order;
    # another CPU's kernels moved one of -4.77 by 1.1e-5).
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
                assert ma.logprobs == pytest.approx(mb.logprobs, rel=1e-5, abs=1e-5)
        assert a.reward.total == b.reward.total


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.xdist_group("grpo_runs")
def test_fsdp_resume_equals_single_process_resume(request, tmp_path):
    """A sharded checkpoint resumes: one more step from it under FSDP equals one more step from the
    single-process checkpoint of the same first step."""
    cfg = _config(tmp_path, {"name": "grpo"})
    _one_and_fsdp(request, tmp_path, cfg, "grpo")
    _train(tmp_path, cfg, "one", "--resume", "--set", "steps=2")
    _train(tmp_path, cfg, "fsdp", "--set", "parallelism=fsdp", "--resume", "--set", "steps=2", ranks=2)
    for step in (1, 2):
        assert_learning_signal(tmp_path / "fsdp", step)
    one = _state(tmp_path, "one", 2)
    _assert_close(one["model"], _gathered(tmp_path, "fsdp", 2)["model"], "model")
    # The resumed step moved the policy: the two runs agree on a step that did something.
    assert any(not torch.equal(v, one["model"][k]) for k, v in _state(tmp_path, "one")["model"].items())
    rows = [json.loads(line) for line in (tmp_path / "fsdp/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1.0, 2.0]
    _assert_signal(rows[1], "grpo", "fsdp resumed step")


@pytest.mark.long
@pytest.mark.slow
def test_fsdp_with_lora_equals_single_process(tmp_path):
    """LoRA under FSDP2: frozen base and trainable adapters sharded together; the base model (adapters
    disabled) is the KL reference; one step equals the single-process step."""
    cfg = _config(tmp_path, {"name": "grpo", "kl_loss_coef": 0.1}, model={**TINY["model"], "lora_rank": 4})
    _train(tmp_path, cfg, "one")
    _train(tmp_path, cfg, "fsdp", "--set", "parallelism=fsdp", ranks=2)
    one = _state(tmp_path, "one")["model"]
    adapters = [k for k in one if "lora_B" in k]
    assert adapters and any(one[k].abs().sum() > 0 for k in adapters)  # the adapters moved
    _assert_close(one, _gathered(tmp_path, "fsdp")["model"], "model")
    m1, m2 = _metrics(tmp_path, "one"), _metrics(tmp_path, "fsdp")
    assert_learning_signal(tmp_path / "fsdp", 1)
    _assert_signal(m2, "grpo", "fsdp lora")
    for key in ("actor/kl_loss", "actor/entropy", "actor/grad_norm"):
        assert m1[key] == pytest.approx(m2[key], rel=1e-4, abs=1e-9), key
