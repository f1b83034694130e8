"""``agentrl explain TRAJ.jsonl --index I``: turns, the policy-token table with each masked span on one
line, the reward's token marked, per-turn advantage sums that add up, values from a critic
checkpoint or from a training run's stored numbers."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from agentrl.cli import main
from agentrl.learn.batch import build_batch
from agentrl.learn.models import ValueModel, build_tiny_model
from agentrl.rundir import write_token_stats
from agentrl.tokens import Expander
from agentrl.train.checkpoint import save_checkpoint
from agentrl.train.config import AlgorithmConfig, TrainConfig
from agentrl.train.token_log import collect_token_stats
from agentrl.train.update import compute_advantages, forward_values
from agentrl.trajectory import read_trajectories, write_trajectories
from tests.replay.helpers import record_episodes, save_tokenizer
from tests.tokens.fixtures import make_tokenizer_cached

SPEC = "tiny:layers=1,hidden=32,heads=2,kv_heads=1"
MASKED = re.compile(r"^\s*(\d+)(?:–(\d+))?  \[([a-z+]+): (\d+) tokens?, masked\] \"")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTRL_CACHE", str(tmp_path_factory.mktemp("agentrl-cache")))
        traj, _ = record_episodes(tmp_path_factory.mktemp("recorded"))
    return traj, save_tokenizer(tmp_path_factory.mktemp("tok"))


def _explain(capsys, *argv):
    assert main(["explain", *map(str, argv)]) == 0
    return capsys.readouterr().out


def _batch(traj):
    tok = make_tokenizer_cached("chatml")
    trajs = list(read_trajectories(traj))
    keep, batch, _ = build_batch(
        trajs, Expander(tok), normalize=True, pad_id=tok.pad_token_id, device=torch.device("cpu")
    )
    return trajs, keep, batch


def test_turns_masked_spans_reward_marker_and_credit(data, capsys):
    traj, tok_dir = data
    # A max_len above the row's length (2193 tokens), so that every span of the row is shown.
    out = _explain(capsys, traj, "--index", 1, "--tokenizer", tok_dir, "--max-len", 4096)
    lines = out.splitlines()
    assert lines[0] == "trajectory alphabet-2025-cloud#1 (index 1, task alphabet-2025-cloud), reward 0.5"
    turns = "\n".join(
        lines[
            : lines.index(
                "grpo, γ = 1, λ = 0.95; values: none (advantages are group-relative); numbers: recomputed by replay"
            )
        ]
    )
    assert re.search(r"turn 0\n  tool call    search \{\"query\": ", turns)
    assert re.search(r"turn 1\n  tool call    open_url \{\"url\": \"https://buzzstock-gossip", turns)
    assert "  observation  Title: LEAKED: Google's 2025 financial results" in turns
    assert re.search(r"turn 2\n  report       Google's full-year 2025 revenue is \$5 trillion", turns)

    row = Expander(make_tokenizer_cached("chatml"), max_len=4096).expand(list(read_trajectories(traj))[1])
    mask = row.loss_mask.astype(bool)
    runs = [(a, b) for a, b in _runs(~mask)]
    spans = [MASKED.match(line) for line in lines if MASKED.match(line)]
    assert [(int(m.group(1)), int(m.group(2) or m.group(1)) + 1) for m in spans] == runs
    assert [m.group(3) for m in spans] == ["prompt", "observation", "observation", "template"]
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["t", "turn", "token"])
    rows = [
        line for line in lines[header + 2 :] if re.match(r"^\s*\d+\s+\d+\s", line) and not MASKED.match(line)
    ]
    assert [int(r.split()[0]) for r in rows] == np.flatnonzero(mask).tolist()  # policy tokens only
    marked = [r for r in rows if r.endswith("◀ reward")]
    assert len(marked) == 1 and int(marked[0].split()[0]) == np.flatnonzero(mask)[-1]
    assert marked[0].split()[-5] == "0.2000"  # score: 0.5 / 2.5, normalised as in training
    credit = lines[
        lines.index("credit per turn (Σ advantage over the turn's policy tokens, as the update used them):")
        + 1 :
    ]
    assert [c.split()[1] for c in credit[:3]] == ["0", "1", "2"] and credit[0].split()[2] == "search"
    assert credit[1].split()[2] == "open_url" and credit[2].split()[2] == "answer"

    ex = json.loads(
        _explain(capsys, traj, "--index", 1, "--tokenizer", tok_dir, "--max-len", 4096, "--format", "json")
    )
    per_turn = {c["turn"]: c for c in ex["credit"]}
    for k, c in per_turn.items():
        advs = [d["advantage"] for d in ex["tokens"] if d["turn"] == k]
        assert c["advantage_sum"] == pytest.approx(sum(advs)) and c["tokens"] == len(advs)
        assert c["advantage_mean"] == pytest.approx(-1 / math.sqrt(2), abs=1e-5)  # the gossip sample
    assert sum(c["advantage_sum"] for c in ex["credit"]) == pytest.approx(ex["advantage_total"])
    assert sum(c["tokens"] for c in ex["credit"]) == int(mask.sum())


def _runs(flags):
    t, n = 0, len(flags)
    while t < n:
        if not flags[t]:
            t += 1
            continue
        a = t
        while t < n and flags[t]:
            t += 1
        yield a, t


def test_values_from_a_critic_checkpoint(data, tmp_path, capsys):
    traj, tok_dir = data
    tok = make_tokenizer_cached("chatml")
    critic = ValueModel.from_policy(build_tiny_model(len(tok), SPEC, seed=1))
    with torch.no_grad():  # a head that is not zero, so the values are not all 0
        torch.manual_seed(0)
        critic.head.weight.normal_(0, 0.5)
        critic.head.bias.fill_(0.3)
    save_checkpoint(
        tmp_path / "checkpoints", 3, {"critic": critic.state_dict(), "config": {"model": {"path": SPEC}}}
    )
    ex = json.loads(
        _explain(capsys, traj, "--index", 0, "--tokenizer", tok_dir, "--critic", tmp_path, "--format", "json")
    )
    assert ex["algorithm"] == "ppo" and ex["values_from"].startswith("critic") and ex["whitened"]
    _, _, batch = _batch(traj)
    with torch.no_grad():
        want = forward_values(critic.eval(), batch)[0]  # row 0 is trajectory 0
    got = {d["t"]: d for d in ex["tokens"]}
    assert [got[t]["value"] for t in sorted(got)] == pytest.approx(
        [want[t].item() for t in sorted(got)], abs=1e-5
    )
    assert len({round(d["value"], 6) for d in ex["tokens"]}) > 10
    for d in ex["tokens"]:
        assert d["return"] == pytest.approx(d["advantage"] + d["value"], abs=1e-5)
    assert sum(c["advantage_sum"] for c in ex["credit"]) == pytest.approx(ex["advantage_total"])
    assert ex["advantage_total"] == pytest.approx(sum(d["whitened"] for d in ex["tokens"]))
    table = _explain(capsys, traj, "--index", 0, "--tokenizer", tok_dir, "--critic", tmp_path)
    header = next(line.split() for line in table.splitlines() if line.split()[:2] == ["t", "turn"])
    assert header == [
        "t",
        "turn",
        "token",
        "score",
        "reward",
        "value",
        "δ",
        "advantage",
        "whitened",
        "return",
    ]
    assert "credit per turn (Σ whitened advantage" in table


def test_run_dir_numbers_are_read_not_recomputed(data, tmp_path, capsys):
    traj, _ = data
    run = tmp_path / "run"
    save_tokenizer(run / "tokenizer")
    trajs = list(read_trajectories(traj))
    for t in trajs:
        t.info["step"] = 1
    step_file = run / "trajectories" / "step_00001.jsonl"
    write_trajectories(step_file, trajs)
    cfg = TrainConfig.model_validate(
        {"algorithm": {"name": "ppo", "lam": 0.9}, "rollout": {"max_len": 4096}, "output_dir": str(run)}
    )
    save_checkpoint(run / "checkpoints", 1, {"config": cfg.model_dump(mode="json")})
    # What the trainer would have logged, with values of our own choosing.
    _, keep, batch = _batch(step_file)
    T = batch["input_ids"].shape[1]
    batch["values"] = (0.001 * torch.arange(T, dtype=torch.float32)).expand_as(batch["old_logprobs"]).clone()
    compute_advantages(batch, AlgorithmConfig(name="ppo", lam=0.9), [t.task_id for t in keep])
    stats = collect_token_stats([t.id for t in keep], batch)
    write_token_stats(run / "tokens" / "step_00001.npz", stats)

    ex = json.loads(_explain(capsys, step_file, "--index", 1, "--run", run, "--format", "json"))
    assert ex["algorithm"] == "ppo" and ex["lam"] == 0.9 and ex["values_from"] == "stored run"
    assert ex["source"].startswith(f"stored run {run} (step 1)")
    assert any(n.startswith("rebuilt advantages match the stored ones") for n in ex["notes"])
    entry = stats["alphabet-2025-cloud#1"]
    assert [d["t"] for d in ex["tokens"]] == entry["positions"].tolist()
    assert [d["value"] for d in ex["tokens"]] == pytest.approx(
        (0.001 * entry["positions"]).tolist(), abs=1e-6
    )
    assert [d["whitened"] for d in ex["tokens"]] == pytest.approx(entry["advantages"].tolist(), abs=1e-6)
    assert [d["advantage"] for d in ex["tokens"]] == pytest.approx(entry["raw_advantages"].tolist(), abs=1e-6)

    # Tamper with one stored advantage: explain shows the stored number and says it differs.
    entry["advantages"][0] += 5.0
    write_token_stats(run / "tokens" / "step_00001.npz", stats)
    ex = json.loads(_explain(capsys, step_file, "--index", 1, "--run", run, "--format", "json"))
    assert ex["tokens"][0]["whitened"] == pytest.approx(float(entry["advantages"][0]), abs=1e-6)
    assert "rebuilt advantages match the stored ones to 5" in ex["notes"]


def test_without_tokenizer_or_reward_only_turns(data, capsys):
    traj, tok_dir = data
    out = _explain(capsys, traj, "--index", 2)
    assert "turn 2\n  report" in out and "note: no token table: pass --tokenizer T or --run RUN_DIR" in out
    out = _explain(capsys, traj, "--index", 2, "--tokenizer", tok_dir)  # the LLM-rubric task: unscored
    assert "note: not trained: it has no reward" in out and "credit per turn" not in out
