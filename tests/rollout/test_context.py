"""Context management of long episodes (``rollout.context``): with ``drop_observations`` the scripted
oracle answers multi-source tasks that outgrow ``max_len`` without it; every context segment is one
training row equal to what the model was fed and sampled, token for token; GRPO gives every segment
of an episode the episode's advantage, grouped by episode."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from agentrl.env import ResearchEnv
from agentrl.judge import normalized_reward
from agentrl.learn.advantages import compute_advantages
from agentrl.learn.algorithm import AlgorithmConfig
from agentrl.learn.batch import build_batch, row_ids
from agentrl.policy import OraclePolicy
from agentrl.rollout.context import ContextPolicy
from agentrl.rollout.episode import EpisodeSpec, Generation, Limits, run_episode
from agentrl.tokens import Expander, expand_segments
from agentrl.trajectory.context import segments, stub_indices, stub_text, view
from tests.tokens.fixtures import make_tokenizer_cached

SUITE = str(Path(__file__).resolve().parents[2] / "examples" / "long-horizon-env")
MAX_LEN = 2048
NEW = 256  # the longest oracle turn (a three-company report) fits


def _episodes(strategy: str, noise: float = 0.0, samples: int = 1):
    """(trajectory, [(turn, prompt ids, sampled ids)]) of the oracle on every multi-source task."""
    tok = make_tokenizer_cached("chatml")
    exp = Expander(tok, max_len=MAX_LEN)  # as the trainer builds it
    stop = int(tok.convert_tokens_to_ids("<|im_end|>"))
    env = ResearchEnv({"suite": SUITE})
    oracle = OraclePolicy(noise)
    out = []

    async def run() -> None:
        for t in (t for t in env.tasks if t.ground_truth.get("steps")):
            for s in range(samples):
                fed: list[tuple[int, list[int], list[int]]] = []

                async def gen(req, fed=fed):  # type: ignore[no-untyped-def]
                    msg = await oracle.act(req.messages, req.context())
                    ids = [*tok.encode(msg.text, add_special_tokens=False), stop][: req.max_tokens]
                    fed.append((req.turn, list(req.prompt_ids), ids))
                    return Generation(ids, [-0.01 * (i + 1) for i in range(len(ids))])

                limits = Limits(max_new_tokens=NEW, max_len=MAX_LEN, context=ContextPolicy(strategy))
                res = await run_episode(
                    env, EpisodeSpec(f"{t.id}/{s}", t, s), gen, expander=exp, limits=limits
                )
                out.append((res, fed))

    asyncio.run(run())
    return exp, out


@pytest.fixture(scope="module")
def dropped():
    return _episodes("drop_observations")


def test_without_context_management_the_long_tasks_are_cut_and_with_it_answered(dropped):
    _, plain = _episodes("none")
    assert all(res.stop_reason == "max_len" and normalized_reward(res.trajectory) == 0.0 for res, _ in plain)
    _, episodes = dropped
    assert all(normalized_reward(res.trajectory) >= 0.999 for res, _ in episodes)
    assert all(len(p) + NEW <= MAX_LEN for _, fed in episodes for _, p, _ in fed)  # every call fits
    assert max(len(segments(res.trajectory)) for res, _ in episodes) >= 3


def test_every_segments_row_is_what_the_model_was_fed_and_sampled(dropped):
    exp, episodes = dropped
    for res, fed in episodes:
        traj = res.trajectory
        segs = segments(traj)
        rows = expand_segments(exp, traj, reward=1.0)
        assert len(rows) == len(segs) and len(segs) > 1
        trained = 0
        for turn, prompt, sampled in fed:
            k = max(s.index for s in segs if s.first_turn <= turn)
            ids, loss = rows[k].input_ids.tolist(), rows[k].loss_mask.tolist()
            n = len(prompt)
            assert ids[:n] == prompt, (traj.id, turn, k)
            assert ids[n : n + len(sampled)] == sampled
            assert loss[n : n + len(sampled)] == [1] * len(sampled)
            trained += len(sampled)
        assert sum(int(r.loss_mask.sum()) for r in rows) == trained  # each turn trained once
        for r in rows:  # the episode's reward on each row's last policy token
            last = max(i for i, m in enumerate(r.loss_mask) if m)
            assert r.token_level_scores[last] == 1.0 and r.token_level_scores.sum() == 1.0
        assert [r.trajectory_id for r in rows] == [traj.id] + [f"{traj.id}#{k}" for k in range(1, len(rows))]


def test_grpo_gives_every_segment_its_episodes_advantage_grouped_by_episode():
    exp, episodes = _episodes("drop_observations", noise=0.5, samples=2)
    trajs = [res.trajectory for res, _ in episodes]
    keep, batch, _ = build_batch(trajs, exp, normalize=True, pad_id=0, device=torch.device("cpu"))
    assert len(keep) > len(trajs) and "episode" in batch
    group_ids = [t.task_id for t in keep]
    compute_advantages(batch, AlgorithmConfig(name="grpo"), group_ids)
    adv, mask, episode = batch["advantages"], batch["loss_mask"].bool(), batch["episode"].tolist()
    per_row = [float(adv[i][mask[i]][0]) for i in range(len(keep))]
    for i in range(len(keep)):
        assert torch.allclose(adv[i][mask[i]], torch.tensor(per_row[i]))
        assert per_row[i] == per_row[episode.index(episode[i])]  # every segment: the episode's value
    # the same as GRPO over the episodes themselves, one score each
    from agentrl.algos import grpo_advantages

    scores = torch.tensor([normalized_reward(t) for t in trajs])
    want = grpo_advantages(scores, [t.task_id for t in trajs], torch.ones(len(trajs), 1))[:, 0]
    got = [per_row[episode.index(e)] for e in range(len(trajs))]
    assert torch.allclose(torch.tensor(got), want, atol=1e-6)
    assert len(set(row_ids(keep, batch))) == len(keep)


def test_the_stub_is_one_line_and_only_older_results_are_stubbed(dropped):
    _, episodes = dropped
    traj = max((res.trajectory for res, _ in episodes), key=lambda t: len(segments(t)))
    msgs = traj.messages
    for seg in segments(traj)[1:]:
        assistants = [i for i, m in enumerate(msgs) if m.role == "assistant"]
        assert all(msgs[i].role == "tool" and i < assistants[seg.first_turn - 1] for i in seg.stubbed)
    page = next(m for m in msgs if m.role == "tool" and m.text.startswith("Title:"))
    line = stub_text(page)
    assert "\n" not in line and "url: https://" in line and len(line) < len(page.text)
    assert view(msgs, frozenset())[3] is msgs[3]
    assert stub_indices(msgs[:6], 1) == {i for i in range(4) if msgs[i].role == "tool"}
    assert stub_indices(msgs[:6], 0) == {i for i in range(6) if msgs[i].role == "tool"}
    assert stub_indices(msgs[:6], 9) == frozenset()


def test_a_context_policy_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="strategy"):
        ContextPolicy("summarise")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="keep_last_turns"):
        ContextPolicy("drop_observations", keep_last_turns=0)
    assert ContextPolicy().trigger(100) is None and ContextPolicy("drop_observations").trigger(100) == 100
    assert ContextPolicy("drop_observations", trigger_tokens=50).trigger(100) == 50
    assert ContextPolicy("drop_observations", trigger_tokens=500).trigger(100) == 100


def test_replay_rebuilds_the_segment_rows_the_trainer_builds(dropped, tmp_path):
    """``agentrl replay --tensors`` on segmented trajectories: the trainer's batch (a row per segment,
    GRPO by episode), byte-identical between two replays."""
    from agentrl.cli import main
    from agentrl.replay import rebuild_batch, resolve_settings
    from agentrl.trajectory import write_trajectories

    exp, episodes = dropped
    trajs = [res.trajectory for res, _ in episodes]
    for t in trajs:
        t.info["sample"] = 0
    from agentrl.train.config import TrainConfig

    rebuilt = rebuild_batch(trajs, exp, resolve_settings(TrainConfig()), pad_id=0)
    keep, want, _ = build_batch(trajs, exp, normalize=True, pad_id=0, device=torch.device("cpu"))
    compute_advantages(want, AlgorithmConfig(), [t.task_id for t in keep])
    for k, v in want.items():
        assert torch.equal(rebuilt.batch[k], v), k
    assert rebuilt.batch["trajectory_index"].tolist() == want["episode"].tolist()
    path = tmp_path / "traj.jsonl"
    write_trajectories(path, trajs)
    tok_dir = tmp_path / "tok"
    exp.tokenizer.save_pretrained(tok_dir)
    outs = []
    for name in ("a.pt", "b.pt"):
        argv = [
            "replay",
            str(path),
            "--tokenizer",
            str(tok_dir),
            "--tensors",
            str(tmp_path / name),
            "--max-len",
            str(MAX_LEN),
        ]
        assert main(argv) == 0
        outs.append((tmp_path / name).read_bytes())
    assert outs[0] == outs[1]
    assert torch.equal(torch.load(tmp_path / "a.pt")["input_ids"], rebuilt.batch["input_ids"])


def test_explain_and_the_report_show_a_segment_row(dropped, tmp_path, capsys):
    """``agentrl explain --segment K`` (default: the last) and the report's token view show one
    segment's row, said to be one; an out-of-range segment is a one-line error."""
    import json

    from agentrl.cli import main
    from agentrl.explain.report.tokens import TokenSource
    from agentrl.trajectory import write_trajectories

    exp, episodes = dropped
    traj = max((res.trajectory for res, _ in episodes), key=lambda t: len(segments(t)))
    n = len(segments(traj))
    rows = expand_segments(exp, traj)
    path, tok_dir = tmp_path / "t.jsonl", tmp_path / "run" / "tokenizer"
    write_trajectories(path, [traj])
    exp.tokenizer.save_pretrained(tok_dir)
    base = ["explain", str(path), "--tokenizer", str(tok_dir), "--max-len", str(MAX_LEN), "--format", "json"]
    for k in (None, 0):
        assert main(base + ([] if k is None else ["--segment", str(k)])) == 0
        out = json.loads(capsys.readouterr().out)
        want = rows[-1 if k is None else k]
        assert any("context segment" in note for note in out["notes"])
        policy = [i for i, m in enumerate(want.loss_mask.tolist()) if m]
        assert [t["t"] for t in out["tokens"]] == policy and out["reward_token"] == policy[-1], k
    assert main([*base, "--segment", str(n)]) != 0
    assert f"has {n} context segment(s)" in capsys.readouterr().err
    row, why = TokenSource(tmp_path / "run", {}).row(traj, 1)
    assert why is None and row is not None and row.ids.tolist() == rows[-1].input_ids.tolist()
    assert row.note is not None and row.note.startswith(f"context segment {n} of {n}")


def test_turn_rewards_stay_on_the_row_of_the_segment_that_sampled_the_turn(dropped):
    exp, episodes = dropped
    traj = max((res.trajectory for res, _ in episodes), key=lambda t: len(segments(t))).model_copy(deep=True)
    turns = sum(1 for m in traj.messages if m.role == "assistant")
    traj.info["turn_rewards"] = [0.01 * (t + 1) for t in range(turns)]
    rows = expand_segments(exp, traj, reward=1.0)
    for seg, row in zip(segments(traj), rows, strict=True):
        own = sorted({int(t) for t, m in zip(row.turn_ids, row.loss_mask, strict=True) if m})
        assert own == list(range(seg.first_turn, own[-1] + 1))
        for t in range(own[-1] + 1):
            got = float(row.token_level_scores[row.turn_ids == t].sum())
            want = 0.0 if t < seg.first_turn else traj.info["turn_rewards"][t] + (t == own[-1])
            assert got == pytest.approx(want), (seg.index, t)
    total = sum(float(r.token_level_scores.sum()) for r in rows)
    assert total == pytest.approx(len(rows) + sum(traj.info["turn_rewards"]))  # each turn's reward once


def test_a_group_scores_an_episode_once_with_every_segments_shaping():
    """The episode score GRPO sees: the sum of its rows' rewards, the outcome counted once."""
    from agentrl.learn.advantages import _per_episode

    mask = torch.ones(3, 2)
    batch = {"episode": torch.tensor([0, 0, 1]), "outcome": torch.tensor([1.0, 1.0, 0.5])}
    scores = torch.tensor([1.0 - 0.25, 1.0 - 0.5, 0.5 - 0.1])  # outcome + a shaping term, per row
    seen = {}

    def estimator(sc, groups, m):  # type: ignore[no-untyped-def]
        seen["scores"], seen["groups"] = sc.tolist(), list(groups)
        return sc[:, None] * m

    adv = _per_episode(batch, scores, ["a", "a", "b"], mask, estimator)
    assert seen == {"scores": pytest.approx([1.0 - 0.75, 0.4]), "groups": ["a", "b"]}
    assert adv[:, 0].tolist() == pytest.approx([0.25, 0.25, 0.4])


def test_a_last_segment_that_sampled_nothing_has_no_row_and_explain_skips_it(dropped, tmp_path, capsys):
    import json

    from agentrl.cli import main
    from agentrl.trajectory import write_trajectories

    exp, episodes = dropped
    traj = max((res.trajectory for res, _ in episodes), key=lambda t: len(segments(t))).model_copy(deep=True)
    turns = sum(1 for m in traj.messages if m.role == "assistant")
    last = traj.info["context_segments"][-1]
    traj.info["context_segments"].append({**last, "turn": turns})  # rewritten, then nothing sampled
    n = len(segments(traj))
    rows = expand_segments(exp, traj, reward=1.0)
    assert not rows[-1].loss_mask.any()
    keep, batch, _ = build_batch([traj], exp, normalize=True, pad_id=0, device=torch.device("cpu"))
    assert batch["segment"].tolist() == list(range(n - 1)) and len(keep) == n - 1
    from agentrl.integrations.episode import expand_episode  # the adapters' rows: the same rule

    ep = expand_episode(traj, exp, normalize=True)
    assert [r.input_ids.tolist() for r in ep.rows] == [r.input_ids.tolist() for r in rows[:-1]]
    assert len(ep.finishes) == n - 1
    path, tok_dir = tmp_path / "t.jsonl", tmp_path / "tok"
    write_trajectories(path, [traj])
    exp.tokenizer.save_pretrained(tok_dir)
    base = ["explain", str(path), "--tokenizer", str(tok_dir), "--max-len", str(MAX_LEN), "--format", "json"]
    assert main(base) == 0
    policy = [i for i, m in enumerate(rows[-2].loss_mask.tolist()) if m]
    assert json.loads(capsys.readouterr().out)["reward_token"] == policy[-1]
    assert main([*base, "--segment", str(n - 1)]) != 0
    assert "sampled no token" in capsys.readouterr().err


def test_a_noisy_oracle_cites_only_pages_it_opened_after_a_rewrite():
    import re

    from agentrl.judge.evidence import evidence_of, normalize_url

    _, episodes = _episodes("drop_observations", noise=1.0)
    assert any(len(segments(res.trajectory)) > 1 for res, _ in episodes)
    for res, _ in episodes:
        traj = res.trajectory
        opened = {u for p in evidence_of(traj).pages for u in p.urls}
        report = traj.messages[-2].text if traj.messages[-1].role == "tool" else traj.messages[-1].text
        cited = {normalize_url(u) for u in re.findall(r"\\cite\{([^}]+)\}", report)}
        assert cited and cited <= opened, (traj.id, cited - opened)
