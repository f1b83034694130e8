"""``summarize``'s default trigger leaves room for the summary: the rewrite comes when a prompt plus a
turn would pass ``max_len - max_new_tokens``, so the notes (a turn of up to ``max_new_tokens``) can
still be asked for and written from the whole view. With the trigger at ``max_len`` every summary
call would overflow and is written from a stubbed view instead (``test_summarize.py``)."""

from __future__ import annotations

from agentrl.rollout.context import ContextConfig, ContextPolicy, context_policy
from tests.rollout.test_summarize import MAX_LEN, NEW, _episodes


def test_the_default_trigger_of_each_strategy():
    summarize = ContextPolicy("summarize")
    assert summarize.trigger(MAX_LEN, NEW) == MAX_LEN - NEW == 1792
    assert summarize.trigger(MAX_LEN) == MAX_LEN  # no turn to make room for
    assert summarize.trigger(100, 200) == 1  # never below one token
    assert summarize.trigger(None, NEW) is None
    assert ContextPolicy("summarize", trigger_tokens=1000).trigger(MAX_LEN, NEW) == 1000  # set: kept
    assert ContextPolicy("drop_observations").trigger(MAX_LEN, NEW) == MAX_LEN  # stubs need no room
    assert context_policy(ContextConfig(strategy="summarize")).trigger(MAX_LEN, NEW) == MAX_LEN - NEW


def test_by_default_a_summary_is_written_from_the_whole_view():
    """The oracle's long multi-source episodes: with the default trigger most episodes' first
    rewrite is the summary itself (no stub before it), and every prompt fits."""
    _, episodes = _episodes(trigger=None)
    first = [res.trajectory.info["context_segments"][0]["strategy"] for res, _ in episodes]
    assert first.count("summarize") > len(first) / 2, first
    assert all(len(p) + NEW <= MAX_LEN for _, fed in episodes for _, _, p, _ in fed)
    _, no_room = _episodes(trigger=MAX_LEN)  # the contrast: at max_len every summary needs a stub first
    assert {res.trajectory.info["context_segments"][0]["strategy"] for res, _ in no_room} == {
        "drop_observations"
    }
