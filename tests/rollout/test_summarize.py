"""Context management by summary (``rollout.context.strategy: summarize``): at the trigger the policy
writes notes on its research (a sampled turn, trained), and the context restarts from the task with
the notes. The scripted oracle, which reads its notes back, answers every multi-source task that
outgrows ``max_len`` without a rewrite; every segment's row is exactly what the model was fed and
sampled (its notes included); the view after a summary is the system prompt, the task with the
notes, and the last turns verbatim."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from agentrl.env import ResearchEnv
from agentrl.judge import normalized_reward
from agentrl.learn.advantages import compute_advantages
from agentrl.learn.algorithm import AlgorithmConfig
from agentrl.learn.batch import build_batch
from agentrl.policy import OraclePolicy
from agentrl.rollout.context import ContextPolicy
from agentrl.rollout.episode import EpisodeSpec, Generation, Limits, run_episode
from agentrl.tokens import Expander, expand_segments
from agentrl.trajectory import Message
from agentrl.trajectory.context import (
    SUMMARY_HEADER,
    SUMMARY_REQUEST,
    ContextView,
    segment_messages,
    segments,
)
from tests.tokens.fixtures import make_tokenizer_cached

SUITE = str(Path(__file__).resolve().parents[2] / "examples" / "long-horizon-env")
MAX_LEN = 2048
NEW = 256


def _episodes(
    trigger: int | None = None,
    keep: int = 1,
    max_len: int = MAX_LEN,
    noise: float = 0.0,
    samples: int = 1,
    strategy: str = "summarize",
    completion: int | None = None,
    long_notes: bool = False,
):
    """(result, [(turn, summary?, prompt ids, sampled ids)]) of the oracle on every multi-source task."""
    tok = make_tokenizer_cached("chatml")
    exp = Expander(tok, max_len=max_len)
    stop = int(tok.convert_tokens_to_ids("<|im_end|>"))
    env = ResearchEnv({"suite": SUITE})
    oracle = OraclePolicy(noise)
    out = []

    async def run() -> None:
        for t in (t for t in env.tasks if t.ground_truth.get("steps")):
            for s in range(samples):
                fed: list[tuple[int, bool, list[int], list[int]]] = []

                async def gen(req, fed=fed):  # type: ignore[no-untyped-def]
                    msg = await oracle.act(req.messages, req.context())
                    text = msg.text + ("\n" + "pad " * 400 if req.summary and long_notes else "")
                    ids = [*tok.encode(text, add_special_tokens=False)[: (req.max_tokens or 10**9) - 1], stop]
                    fed.append((req.turn, req.summary, list(req.prompt_ids), ids))
                    return Generation(ids, [-0.01 * (i + 1) for i in range(len(ids))])

                policy = ContextPolicy(strategy, trigger, keep)  # type: ignore[arg-type]
                limits = Limits(NEW, max_len, completion, context=policy)
                res = await run_episode(
                    env, EpisodeSpec(f"{t.id}/{s}", t, s), gen, expander=exp, limits=limits
                )
                out.append((res, fed))

    asyncio.run(run())
    return exp, out


@pytest.fixture(scope="module")
def summarized():
    return _episodes(trigger=1024)


def _row_of(segs, turn: int, summary: bool) -> int:
    if summary:  # the notes close the row of the segment they were written in
        return next(s.index for s in segs if s.closing is not None and s.end_turn == turn)
    return max(s.index for s in segs if s.first_turn <= turn)


def test_the_oracle_answers_every_long_task_from_its_notes(summarized):
    _, episodes = summarized
    assert all(normalized_reward(res.trajectory) >= 0.999 for res, _ in episodes)
    assert all(len(p) + NEW <= MAX_LEN for _, fed in episodes for _, _, p, _ in fed)
    notes = [f for _, fed in episodes for f in fed if f[1]]
    assert notes and max(len(segments(res.trajectory)) for res, _ in episodes) >= 3
    for res, fed in episodes:  # one summary per rewrite, each a sampled turn of the loop
        recs = res.trajectory.info["context_segments"]
        assert [r["turn"] for r in recs if r["strategy"] == "summarize"] == [t for t, s, _, _ in fed if s]


def test_every_segments_row_is_what_the_model_was_fed_and_sampled_notes_included(summarized):
    exp, episodes = summarized
    for res, fed in episodes:
        traj = res.trajectory
        segs = segments(traj)
        rows = expand_segments(exp, traj, reward=1.0)
        assert len(rows) == len(segs)
        trained = 0
        for turn, summary, prompt, sampled in fed:
            k = _row_of(segs, turn, summary)
            ids, loss = rows[k].input_ids.tolist(), rows[k].loss_mask.tolist()
            n = len(prompt)
            assert ids[:n] == prompt, (traj.id, turn, summary, k)
            assert ids[n : n + len(sampled)] == sampled
            assert loss[n : n + len(sampled)] == [1] * len(sampled)
            trained += len(sampled)
        assert sum(int(r.loss_mask.sum()) for r in rows) == trained  # each turn, each note trained once
        for r in rows:
            last = max(i for i, m in enumerate(r.loss_mask) if m)
            assert r.token_level_scores[last] == 1.0 and r.token_level_scores.sum() == 1.0
        for seg in segs:  # the notes' log-probs are those sampled
            if seg.closing is not None:
                assert seg.closing[1].logprobs == [
                    -0.01 * (i + 1) for i in range(len(seg.closing[1].token_ids))
                ]


def test_after_a_summary_the_context_is_the_task_with_the_notes_and_the_last_turns(summarized):
    _, episodes = summarized
    for res, _ in episodes:
        traj = res.trajectory
        msgs = traj.messages
        for seg in segments(traj)[1:]:
            if traj.info["context_segments"][seg.index - 1]["strategy"] != "summarize":
                continue  # a drop (before the notes, or before any) keeps the view it had, with stubs
            shown = segment_messages(traj, seg)
            task = next(m for m in msgs if m.role == "user")
            head = next(m for m in shown if m.role == "user")
            assert head.text.startswith(task.text + "\n\n" + SUMMARY_HEADER + "\n")
            assert shown[0] == msgs[0] and shown[0].role == "system"
            # what follows the task: the last turn before the rewrite (its call and result) verbatim
            kept = seg.context.kept_from
            assert msgs[kept].role == "assistant"
            assert sum(m.role == "assistant" for m in msgs[kept : _n_before(msgs, seg.first_turn)]) == 1
            assert (
                shown[2 : 2 + _n_before(msgs, seg.first_turn) - kept]
                == msgs[kept : _n_before(msgs, seg.first_turn)]
            )
            assert (
                SUMMARY_REQUEST not in [m.text for m in shown if m.role == "user"] or seg.closing is not None
            )
        assert [
            m for m in msgs if m.role == "user" and m.text == SUMMARY_REQUEST
        ] == []  # notes stay off the env


def _n_before(msgs, turn: int) -> int:
    """The number of messages before the episode's assistant turn ``turn``."""
    seen = -1
    for i, m in enumerate(msgs):
        if m.role == "assistant":
            seen += 1
            if seen == turn:
                return i
    return len(msgs)


def test_keep_last_turns_widens_the_verbatim_tail():
    _, episodes = _episodes(trigger=2048, keep=2, max_len=4096)  # room for two turns verbatim
    assert all(normalized_reward(res.trajectory) >= 0.999 for res, _ in episodes)
    for res, _ in episodes:
        for seg in segments(res.trajectory)[1:]:
            if res.trajectory.info["context_segments"][seg.index - 1]["strategy"] != "summarize":
                continue
            msgs = res.trajectory.messages
            kept = sum(
                m.role == "assistant" for m in msgs[seg.context.kept_from : _n_before(msgs, seg.first_turn)]
            )
            assert kept == 2


def test_a_summary_that_would_not_fit_is_written_from_a_stubbed_view():
    """With the trigger at max_len (no headroom), the summary call would pass max_len: the older
    tool results are stubbed first (a drop_observations segment of its own, which writes the notes)."""
    exp, episodes = _episodes(trigger=MAX_LEN)
    assert all(normalized_reward(res.trajectory) >= 0.999 for res, _ in episodes)
    for res, fed in episodes:
        recs = res.trajectory.info["context_segments"]
        assert recs and all(r["strategy"] == "drop_observations" for r in recs[0::2])
        assert all(
            r["strategy"] == "summarize" and r["turn"] == d["turn"]
            for d, r in zip(recs[0::2], recs[1::2], strict=True)
        )
        traj = res.trajectory
        segs = segments(traj)
        rows = expand_segments(exp, traj, reward=1.0)
        for turn, summary, prompt, sampled in fed:
            assert len(prompt) + NEW <= MAX_LEN
            ids = rows[_row_of(segs, turn, summary)].input_ids.tolist()
            assert ids[: len(prompt) + len(sampled)] == prompt + sampled


def test_grpo_gives_every_segment_its_episodes_advantage():
    exp, episodes = _episodes(trigger=1024, noise=0.5, samples=2)
    trajs = [res.trajectory for res, _ in episodes]
    keep, batch, _ = build_batch(trajs, exp, normalize=True, pad_id=0, device=torch.device("cpu"))
    assert len(keep) > len(trajs)
    compute_advantages(batch, AlgorithmConfig(name="grpo"), [t.task_id for t in keep])
    adv, mask, episode = batch["advantages"], batch["loss_mask"].bool(), batch["episode"].tolist()
    per_row = [float(adv[i][mask[i]][0]) for i in range(len(keep))]
    for i in range(len(keep)):
        assert torch.allclose(adv[i][mask[i]], torch.tensor(per_row[i]))
        assert per_row[i] == per_row[episode.index(episode[i])]


def test_the_view_rule_is_one_for_the_loop_and_the_records():
    view = ContextView().after({"strategy": "summarize", "task": "T + notes", "kept_from": 3})
    assert view.head == "T + notes" and view.kept_from == 3 and view.stubbed == frozenset()
    after = view.after({"strategy": "drop_observations", "stubbed": [4]})
    assert after.head == "T + notes" and after.kept_from == 3 and after.stubbed == {4}


def test_stored_summarized_trajectories_replay_to_the_same_rows(summarized, tmp_path):
    """Written and read back (the notes' ids in the records), the trajectories give the same rows,
    ``replay --tensors``' rebuild equals the trainer's batch, and the report says a segment restarted
    from the notes."""
    from agentrl.explain.report.tokens import TokenSource
    from agentrl.replay import rebuild_batch, resolve_settings
    from agentrl.train.config import TrainConfig
    from agentrl.trajectory import read_trajectories, write_trajectories

    exp, episodes = summarized
    trajs = [res.trajectory for res, _ in episodes]
    for t in trajs:
        t.info["sample"] = 0
    path = tmp_path / "t.jsonl"
    write_trajectories(path, trajs)
    back = list(read_trajectories(path))
    for a, b in zip(trajs, back, strict=True):
        for x, y in zip(
            expand_segments(exp, a, reward=1.0), expand_segments(exp, b, reward=1.0), strict=True
        ):
            assert (
                x.input_ids.tolist() == y.input_ids.tolist() and x.loss_mask.tolist() == y.loss_mask.tolist()
            )
            assert x.old_logprobs.tolist() == y.old_logprobs.tolist()
    rebuilt = rebuild_batch(back, exp, resolve_settings(TrainConfig()), pad_id=0)
    keep, want, _ = build_batch(trajs, exp, normalize=True, pad_id=0, device=torch.device("cpu"))
    compute_advantages(want, AlgorithmConfig(), [t.task_id for t in keep])
    for k, v in want.items():
        assert torch.equal(rebuilt.batch[k], v), k
    exp.tokenizer.save_pretrained(tmp_path / "run" / "tokenizer")
    row, why = TokenSource(tmp_path / "run", {}).row(back[0], 1)
    assert (
        why is None
        and row is not None
        and "restarted from the task with the policy's notes" in (row.note or "")
    )


@pytest.mark.parametrize("strategy", ["drop_observations", "summarize"])
def test_max_completion_tokens_counts_from_each_segments_first_prompt(strategy):
    """An engine's fixed response length (``max_completion_tokens``, verl's ``response_length``)
    bounds each segment's row — its own response — not the episode: a rewrite starts a new budget,
    so the long tasks are still answered and no row's response passes the budget."""
    # drop_observations: a segment needs at most ~1070 here, a whole episode ~1550; summarize: the
    # first segment (two turns, then the notes) ~1620, so long notes must be cut to the budget's rest
    budget = {"drop_observations": 1300, "summarize": 1650}[strategy]
    exp, episodes = _episodes(trigger=1024, strategy=strategy, completion=budget)
    assert all(normalized_reward(res.trajectory) >= 0.999 for res, _ in episodes)
    if strategy == "summarize":  # notes as long as allowed: they too stay within the segment's budget
        episodes += _episodes(trigger=1024, strategy=strategy, completion=budget, long_notes=True)[1]
    for res, fed in episodes:
        segs = segments(res.trajectory)
        rows = expand_segments(exp, res.trajectory, reward=1.0)
        for k, row in enumerate(rows):
            own = [p for turn, notes, p, _ in fed if _row_of(segs, turn, notes) == k]
            if not row.loss_mask.any():
                continue  # a last segment that sampled nothing (the budget ended the episode)
            end = int(row.loss_mask.nonzero()[0][-1]) + 1  # through the last sampled token
            assert own and end - len(own[0]) <= budget, (res.trajectory.id, k)


def test_a_summary_is_asked_only_where_it_removes_a_turn(summarized):
    """Notes that would keep every turn shown (the first rewrite with ``keep_last_turns: 1``, or a
    ``keep_last_turns`` above the turns) only lengthen the context: none is asked for."""
    _, episodes = summarized
    for res, _ in episodes:
        msgs, start = res.trajectory.messages, 0
        for r in res.trajectory.info["context_segments"]:
            if r["strategy"] == "summarize":
                assert any(m.role == "assistant" for m in msgs[start : r["kept_from"]])
                start = r["kept_from"]
    _, keep_all = _episodes(trigger=1024, keep=20)
    assert not [f for _, fed in keep_all for f in fed if f[1]]


def test_chat_mode_notes_keep_no_server_prompt():
    """A generate function that answers the summary request with a chat ``Message`` carrying the
    server's prompt ids: the record keeps the notes only."""
    from agentrl.policy.server_reply import PROMPT_IDS

    tok = make_tokenizer_cached("chatml")
    exp, stop = Expander(tok, max_len=MAX_LEN), int(tok.convert_tokens_to_ids("<|im_end|>"))
    env = ResearchEnv({"suite": SUITE})
    task = next(t for t in env.tasks if t.ground_truth.get("steps"))
    oracle = OraclePolicy(0.0)

    async def gen(req):  # type: ignore[no-untyped-def]
        msg = await oracle.act(req.messages, req.context())
        if req.summary:
            return Message.model_validate({"role": "assistant", "content": msg.text, PROMPT_IDS: [1, 2, 3]})
        ids = [*tok.encode(msg.text, add_special_tokens=False), stop]
        return Generation(ids, [0.0] * len(ids))

    limits = Limits(NEW, MAX_LEN, context=ContextPolicy("summarize", 1024))
    res = asyncio.run(run_episode(env, EpisodeSpec("t", task, 0), gen, expander=exp, limits=limits))
    notes = [r["summary"] for r in res.trajectory.info["context_segments"] if r["strategy"] == "summarize"]
    assert notes and all(PROMPT_IDS not in n for n in notes)
    assert normalized_reward(res.trajectory) >= 0.999
