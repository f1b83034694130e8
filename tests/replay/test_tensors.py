"""``agentrl replay --tensors``: the batch agentrl.train would build (build_batch + compute_advantages),
byte-identical across runs, with hand-checked GRPO and PPO advantages."""

from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys

import pytest
import torch

from agentrl.cli import main
from agentrl.learn.batch import build_batch
from agentrl.tokens import DEFAULT_MAX_LEN, Expander
from agentrl.train.config import AlgorithmConfig
from agentrl.train.update import compute_advantages
from agentrl.trajectory import read_trajectories
from tests.tokens.fixtures import make_tokenizer_cached


def _replay(tmp_path, traj, tok_dir, name, *extra):
    out = tmp_path / name
    assert main(["replay", str(traj), "--tokenizer", str(tok_dir), "--tensors", str(out), *extra]) == 0
    return out


def _training_batch(traj, cfg):
    tok = make_tokenizer_cached("chatml")
    trajs = list(read_trajectories(traj))
    # Without a run, replay uses the trainer's defaults, max_len included.
    exp = Expander(tok, max_len=DEFAULT_MAX_LEN)
    keep, batch, _ = build_batch(
        trajs, exp, normalize=True, pad_id=tok.pad_token_id, device=torch.device("cpu")
    )
    if cfg.name == "ppo":
        batch["values"] = torch.zeros_like(batch["old_logprobs"])
    compute_advantages(batch, cfg, [t.task_id for t in keep])
    return keep, batch


@pytest.mark.parametrize(
    ("argv", "cfg"),
    [
        ((), AlgorithmConfig()),
        (
            ("--algorithm", "ppo", "--gamma", "0.9", "--lam", "0.8"),
            AlgorithmConfig(name="ppo", gamma=0.9, lam=0.8),
        ),
    ],
)
def test_tensors_equal_the_training_batch_and_are_byte_identical(
    recorded, tok_dir, tmp_path, capsys, argv, cfg
):
    traj, _ = recorded
    a = _replay(tmp_path, traj, tok_dir, "a.pt", *argv)
    b = _replay(tmp_path, traj, tok_dir, "other-name.pt", *argv)
    out = capsys.readouterr().out
    assert a.read_bytes() == b.read_bytes()
    assert hashlib.sha256(a.read_bytes()).hexdigest() in out
    got = torch.load(a)
    _, want = _training_batch(traj, cfg)
    assert got["trajectory_index"].tolist() == [0, 1, 4, 5]  # the LLM-rubric task is unscored: left out
    assert set(got) == set(want) | {"trajectory_index"}
    for k, v in want.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k
    assert "left out as training does: 2 unscored" in out


def test_tensors_are_byte_identical_in_another_process(recorded, tok_dir, tmp_path):
    """Another interpreter with another hash seed writes the same bytes."""
    traj, _ = recorded
    a = _replay(tmp_path, traj, tok_dir, "here.pt")
    b = tmp_path / "there.pt"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    cmd = [
        sys.executable,
        "-m",
        "agentrl",
        "replay",
        str(traj),
        "--tokenizer",
        str(tok_dir),
        "--tensors",
        str(b),
    ]
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    assert hashlib.sha256(a.read_bytes()).hexdigest() == hashlib.sha256(b.read_bytes()).hexdigest()


def test_grpo_and_ppo_advantages_by_hand(recorded, tok_dir, tmp_path):
    traj, _ = recorded
    g = torch.load(_replay(tmp_path, traj, tok_dir, "g.pt"))
    mask = g["loss_mask"].bool()
    # Rows 0, 1: alphabet-2025-cloud, normalised rewards 2.5/2.5 = 1 and 0.5/2.5 = 0.2; mean 0.6 and
    # sample std 0.4·√2, so ±1/√2 on every policy token. Rows 2, 3 (both 2.5): 0.
    for row, want in [(0, 1 / math.sqrt(2)), (1, -1 / math.sqrt(2)), (2, 0.0), (3, 0.0)]:
        adv = g["advantages"][row][mask[row]]
        assert torch.allclose(adv, torch.full_like(adv, want), atol=1e-5), row
        last = mask[row].nonzero().max()
        assert g["token_level_scores"][row].nonzero().flatten().tolist() == [last.item()]
    assert g["token_level_scores"][:, :].sum(-1).tolist() == pytest.approx([1.0, 0.2, 1.0, 1.0])
    # PPO with V = 0, γ = λ = 1: every policy token's GAE advantage is the final reward.
    p = torch.load(
        _replay(tmp_path, traj, tok_dir, "p.pt", "--algorithm", "ppo", "--gamma", "1", "--lam", "1")
    )
    for row, r in enumerate([1.0, 0.2, 1.0, 1.0]):
        raw = p["raw_advantages"][row][mask[row]]
        assert torch.allclose(raw, torch.full_like(raw, r), atol=1e-6)
        assert torch.allclose(p["returns"][row][mask[row]], raw)
    # Whitened over the whole batch's policy tokens (mean 0, unbiased std 1).
    w = p["advantages"][mask].double()
    assert w.mean().item() == pytest.approx(0.0, abs=1e-5) and w.std().item() == pytest.approx(1.0, abs=1e-4)
    # --raw-reward trains on the rubric total instead.
    raw = torch.load(_replay(tmp_path, traj, tok_dir, "r.pt", "--raw-reward"))
    assert raw["token_level_scores"].sum(-1).tolist() == pytest.approx([2.5, 0.5, 2.5, 2.5])
