"""The scorecard's figures against hand-computed values and a slow recomputation from the episodes;
its research shares as ``agentrl eval`` prints and writes them."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

from agentrl.cli import main
from agentrl.eval import scorecard, scorecard_table
from agentrl.eval.stats import bootstrap_ci
from agentrl.jsonl import dumps
from agentrl.trajectory import Message, write_trajectories
from tests.eval.fixtures import episode, recalling, researching, traj, wandering


def _suite_of_three():
    """Task a: 1, 1, 0.5; task b: 0 (unanswered: it counts 0), 0.5; task c: 0.25 and a judge error
    (left out); task d only unjudged. Task means 2.5/3, 0.25, 0.25."""
    return [
        traj("a", 0, 1.0, criteria={"acc": 1.0, "neg-rumor": 0.0}, tool_calls=2),
        traj("a", 1, 1.0, criteria={"acc": 1.0, "neg-rumor": 1.0}, tool_calls=1),
        traj("a", 2, 0.5, criteria={"acc": 0.0, "neg-rumor": 0.0}),
        traj("b", 0, 0.0, status="unanswered", truncated_reason="max_turns"),
        traj("b", 1, 0.5, criteria={"acc": 0.0, "neg-rumor": 0.0}, truncated_reason="generation_limit"),
        traj("c", 0, 0.25, criteria={"acc": 0.0, "neg-rumor": 0.0}),
        traj("c", 1, None, judge_error=True),
        traj("d", 0, None),
    ]


def test_scorecard_hand_values():
    card = scorecard(_suite_of_three(), kinds={}, n_boot=2000, seed=4)
    task_means = [2.5 / 3, 0.25, 0.25]
    assert card.tasks == 4 and card.episodes == 8 and card.scored == 6
    assert card.judge_errors == 1 and card.unjudged == 1
    assert card.samples_per_task == 3 and card.min_samples_per_task == 1
    assert card.reward is not None and card.reward.mean == pytest.approx(np.mean(task_means))
    lo, hi = bootstrap_ci(task_means, n_boot=2000, seed=4)  # the interval is over the 3 scored tasks
    assert (card.reward.low, card.reward.high) == pytest.approx((lo, hi))
    assert card.mean_at_n == card.reward.mean
    assert card.best_at_n == pytest.approx(np.mean([1.0, 0.5, 0.25]))
    assert card.worst_at_n == pytest.approx(np.mean([0.5, 0.0, 0.25]))
    assert card.std_at_n == pytest.approx(np.mean([np.std([1, 1, 0.5]), 0.25, 0.0]))
    # pass = a full score: a passes 2 of 3, b 0 of 2, c 0 of 1
    assert card.pass_at_k["1"] == pytest.approx(np.mean([2 / 3, 0, 0]))
    assert card.pass_at_k["2"] == pytest.approx(np.mean([1.0, 0.0]))  # tasks with ≥ 2 samples: a, b
    assert card.pass_at_k["3"] == pytest.approx(1.0)  # only a has 3
    assert set(card.pass_at_k) == {"1", "2", "3"}
    assert card.tool_call_episodes == pytest.approx(2 / 8)
    assert card.unanswered == pytest.approx(1 / 8)
    assert card.token_limit == pytest.approx(1 / 8)
    assert card.official_share is None and card.opened_pages is None
    rates = {c.id: (c.pass_rate, c.episodes, c.kind) for c in card.criteria}
    assert rates["acc"] == (pytest.approx(2 / 5), 5, "positive")
    assert rates["neg-rumor"] == (pytest.approx(4 / 5), 5, "negative")  # free of the flaw in 4 of 5


def test_pass_at_k_of_the_scorecard_matches_subset_enumeration():
    """Per task, pass@k = the share of k-subsets of its samples with a full score; then the mean."""
    rng = np.random.default_rng(3)
    trajs, per_task = [], {}
    for t in range(6):
        rewards = rng.choice([0.0, 0.5, 1.0], size=5).tolist()
        per_task[f"t{t}"] = rewards
        trajs += [traj(f"t{t}", s, r) for s, r in enumerate(rewards)]
    card = scorecard(trajs, kinds={}, n_boot=200)
    for k in (1, 2, 4, 5):
        ref = np.mean(
            [
                np.mean([any(v[i] >= 1.0 for i in sub) for sub in itertools.combinations(range(5), k)])
                for v in per_task.values()
            ]
        )
        assert card.pass_at_k[str(k)] == pytest.approx(ref), k


def test_pass_threshold_and_rounding():
    trajs = [traj("a", 0, 1.0 - 1e-12), traj("a", 1, 0.6)]
    assert scorecard(trajs, kinds={}, n_boot=200).pass_at_k["1"] == pytest.approx(0.5)
    assert scorecard(trajs, kinds={}, n_boot=200, pass_threshold=0.5).pass_at_k["1"] == pytest.approx(1.0)


def test_official_share_counts_opened_official_pages():
    log = [
        {"tool": "open_url", "ok": True, "args": {"url": "https://ir.x.example/q1"}},
        {"tool": "open_url", "ok": True, "args": {"url": "https://gossip.example/q1"}},
        {"tool": "open_url", "ok": False, "args": {"url": "https://ir.x.example/q2"}},
        {"tool": "search", "ok": True, "args": {"query": "x"}},
    ]
    kinds = {"https://ir.x.example/q1": "official", "https://gossip.example/q1": "gossip"}
    card = scorecard([traj("a", 0, 1.0, tool_log=log)], kinds=kinds, n_boot=200)
    assert card.opened_pages == 2 and card.official_share == pytest.approx(0.5)


def test_a_turn_cut_by_length_counts_at_the_token_limit():
    t = traj("a", 0, 0.0)
    t.messages.append(Message(role="assistant", content="cut", finish_reason="length"))
    assert scorecard([t], kinds={}, n_boot=200).token_limit == 1.0


def test_nothing_scored_gives_no_interval_and_a_table():
    card = scorecard([traj("a", 0, None), traj("b", 0, None, judge_error=True)], kinds={}, n_boot=200)
    assert card.reward is None and card.pass_at_k == {} and card.scored == 0
    text = scorecard_table(card)
    assert "mean normalised reward" in text and " -" in text


def test_table_says_what_pass_means_and_how_intervals_are_made():
    text = scorecard_table(scorecard(_suite_of_three(), kinds={}, n_boot=500, seed=2), title="t.jsonl")
    assert text.splitlines()[0] == "t.jsonl"
    assert "pass = a full-score report" in text
    assert "percentile bootstrap over tasks, 500 resamples, seed 2" in text
    assert "neg-rumor (negative)" in text and "80.0% of 5" in text
    text = scorecard_table(scorecard(_suite_of_three(), kinds={}, n_boot=500, pass_threshold=0.5))
    assert "pass = normalised reward ≥ 0.5" in text


def test_the_scorecard_does_not_depend_on_the_order_of_the_episodes():
    trajs = _suite_of_three()
    assert scorecard(trajs[::-1], kinds={}, n_boot=500) == scorecard(trajs, kinds={}, n_boot=500)


def _research_mix():
    """Shares that differ from each other, so a swap shows: searches 1 + 0 + 1 of 1 + 1 + 2 (2/4),
    opened URLs 1 + 0 + 1 of 3 (2/3), answers with figures 1 + 0 of 2 (1/2; the wanderer never
    answers). The wanderer is unjudged: the shares read the episode, not its reward."""
    return [
        researching(task="a", reward=1.0),
        recalling(task="b", reward=0.0),
        wandering(task="c"),
    ]


RESEARCH_JSON = {
    "query_names_subject": {"hits": 2, "total": 4, "share": 0.5},
    "url_from_context": {"hits": 2, "total": 3, "share": 2 / 3},
    "answer_figures_opened": {"hits": 1, "total": 2, "share": 0.5},
}


def test_agentrl_eval_prints_and_writes_the_research_shares(tmp_path, capsys):
    """The scorecard of ``agentrl eval FILE`` shows research or recall, counted by hand above, in its
    table (one labelled line each, in order, under their heading) and in its JSON (stdout and
    ``--json``)."""
    path, js = tmp_path / "mix.jsonl", tmp_path / "card.json"
    write_trajectories(path, _research_mix())
    assert main(["eval", str(path), "--n-boot", "200", "--json", str(js)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["research"] == RESEARCH_JSON == json.loads(js.read_text())["research"]
    lines = err.splitlines()
    at = lines.index("  research or recall (per call or answer)")
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[at + 1 : at + 4]]
    assert rows == [
        ["searches naming the subject", "2/4 (50%)"],
        ["opened URLs from a tool result", "2/3 (67%)"],
        ["answer figures on an opened page", "1/2 (50%)"],
    ]
    assert lines[at + 4].startswith("  (pass = ")  # nothing else is under the heading


def test_research_shares_with_nothing_to_count_are_null_and_a_dash():
    """An episode with no search, no open_url and no figure: every share is None, which the strict
    JSON writes as null, and the table as a dash."""
    card = scorecard(
        [episode(("answer", {"report": "Not yet published."}, ""), reward=0.0)], kinds={}, n_boot=200
    )
    assert json.loads(dumps(card.model_dump(mode="json")))["research"] == {
        k: {"hits": 0, "total": 0, "share": None} for k in RESEARCH_JSON
    }
    text = scorecard_table(card)
    assert re.search(r"searches naming the subject\s+-$", text, re.M)
    assert re.search(r"answer figures on an opened page\s+-$", text, re.M)
