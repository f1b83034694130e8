"""The research shares (``agentrl.eval.research``): what tells an agent that researches the question
from one that recalls its training world, counted by hand on episodes built call by call, and on
the oracle's real sandbox episodes."""

from __future__ import annotations

import json

import pytest

from agentrl.cli import main
from agentrl.env.sandbox import build
from agentrl.eval.research import answer_figures, research_shares, subject_names
from agentrl.trajectory import read_trajectories
from tests.eval.fixtures import PAGE, RELEASE, RESULTS, Q, episode


def test_subject_names_are_the_question_s_own_names():
    assert subject_names(Q) == {"ostionline"}
    q = "Compare Zelexmark Inc. and Quorvo AI revenue in FY2024. Which grew faster? Cite the H1 report."
    assert subject_names(q) == {"zelexmark", "quorvo"}
    assert subject_names("what was revenue in 2021?") == set()


def test_answer_figures_normalise_spacing_case_and_separators():
    assert answer_figures("It was $ 12.3 Billion, or 4.5 %; $1,200 million.") == {
        "$12.3billion",
        "4.5%",
        "$1200million",
    }


def test_a_researching_episode_scores_one_on_every_share():
    t = episode(
        ("search", {"query": "Ostionline Networks revenue Q2 2021"}, RESULTS),
        ("open_url", {"url": RELEASE}, PAGE),
        ("answer", {"report": f"Revenue was $18.5 billion \\cite{{{RELEASE}}}."}, ""),
    )
    s = research_shares([t])
    assert s.figures() == {"query_names_subject": 1.0, "url_from_context": 1.0, "answer_figures_opened": 1.0}
    assert (s.query_names_subject.total, s.url_from_context.total, s.answer_figures_opened.total) == (1, 1, 1)


def test_a_recalling_episode_scores_zero_on_every_share():
    # searches a training company, opens a URL no tool printed, states a figure no opened page holds
    t = episode(
        ("search", {"query": "Zelexmark Networks revenue Q2 2021"}, "Results: nothing about it"),
        ("open_url", {"url": "https://ir.zelexmark.example/news/2021-q2-results"}, PAGE),
        ("answer", {"report": "Revenue was $21.7 billion."}, ""),
    )
    assert research_shares([t]).figures() == {
        "query_names_subject": 0.0,
        "url_from_context": 0.0,
        "answer_figures_opened": 0.0,
    }


def test_shares_pool_calls_over_episodes_and_count_what_they_saw():
    good = episode(
        ("search", {"query": "ostionline results"}, RESULTS),  # lowercase still names it
        ("search", {"query": "revenue Q2 2021"}, "no results"),  # names nothing
        (
            "open_url",
            {"url": RELEASE.upper().replace("HTTPS://", "https://") + "#top"},
            "Error: 404 ($3 billion page)",
        ),
        ("open_url", {"url": RELEASE}, PAGE),
        ("answer", {"report": "Revenue was $18.5 billion, up 4.2%, and $3 billion in cash."}, ""),
    )
    # a URL only the question printed is not from a tool result; an answer without figures is not counted
    other = episode(
        ("open_url", {"url": "https://example.com/x"}, "Title: x\nnothing"),
        ("answer", {"report": "Not yet published."}, ""),
        prompt="What did https://example.com/x say?",
    )
    unanswered = episode(("search", {"query": "Ostionline"}, "no results"))
    s = research_shares([good, other, unanswered])
    assert (s.query_names_subject.hits, s.query_names_subject.total) == (2, 3)
    assert (s.url_from_context.hits, s.url_from_context.total) == (
        1,
        3,
    )  # the failed call is counted, unmatched
    # $3 billion is on no opened page (the 404 text does not count as opened): not grounded
    assert (s.answer_figures_opened.hits, s.answer_figures_opened.total) == (0, 1)
    assert research_shares([]).figures() == dict.fromkeys(s.figures())


def test_a_figure_seen_only_in_search_snippets_is_not_an_opened_page():
    t = episode(
        ("search", {"query": "Ostionline"}, RESULTS + " $18.5 billion"),
        ("answer", {"report": "Revenue was $18.5 billion."}, ""),
    )
    assert research_shares([t]).answer_figures_opened.share == 0.0


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("research-suite")
    build(out, seed=7, companies=2, heldout=1)
    return out


@pytest.mark.parametrize("noise", [0.0, 1.0])
def test_the_oracle_researches_on_the_sandbox(suite, tmp_path, noise):
    out = tmp_path / "o.jsonl"
    argv = ["rollout", "--suite", str(suite), "--split", "all", "--policy", "oracle", "--noise", str(noise),
            "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    trajs = list(read_trajectories(out))
    s = research_shares(trajs)
    assert s.query_names_subject.total >= len(trajs) and s.query_names_subject.share == 1.0
    # what the oracle reports is printed on a page it opened, a distractor's figure included
    assert s.answer_figures_opened.share == 1.0 and s.answer_figures_opened.total >= len(trajs) // 2
    # the oracle opens only pages a search listed (a follow-up search where the first did not list
    # it): every open_url is from context, and a plain count of URLs found verbatim in an earlier
    # observation gives the same figures
    hits = total = 0
    for t in trajs:
        seen = ""
        for m in t.messages:
            for c in m.tool_calls or []:
                if c.function.name == "open_url":
                    total += 1
                    hits += json.loads(c.function.arguments)["url"] in seen
            if m.role == "tool":
                seen += m.text
    assert (s.url_from_context.hits, s.url_from_context.total) == (hits, total) and total >= len(trajs)
    assert hits == total
    searched_twice = sum(t.info["tool_calls"] == 3 for t in trajs)
    assert searched_twice >= 1  # this world needs the follow-up somewhere
