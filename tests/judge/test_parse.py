"""The judge-reply parser: robust to prose, <think>, fences and case; never raises."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.judge import normalize_verdict, parse_reply

IDS = ["accuracy", "temporal"]


def reply(*pairs):
    return json.dumps({"criteria": [{"id": i, "reasoning": "r", "verdict": v} for i, v in pairs]})


def test_plain_json():
    p = parse_reply(reply(("accuracy", "Fully Satisfied"), ("temporal", "Not Satisfied")), IDS)
    assert p.ok and p.verdicts == {"accuracy": ("Fully Satisfied", "r"), "temporal": ("Not Satisfied", "r")}


def test_think_block_fences_and_case():
    decoy = reply(("accuracy", "Not Satisfied"), ("temporal", "Not Satisfied"))
    text = f"<think>maybe {decoy}</think>\nSure:\n```json\n{reply(('accuracy', 'FULLY SATISFIED'), ('temporal', 'partially_satisfied'))}\n```"
    p = parse_reply(text, IDS)
    assert (
        p.ok
        and p.verdicts["accuracy"][0] == "Fully Satisfied"
        and p.verdicts["temporal"][0] == "Partially Satisfied"
    )


def test_unclosed_think_at_start_is_dropped():
    text = f"thinking {reply(('accuracy', 'Not Satisfied'))} ... </think> {reply(('accuracy', 'Fully Satisfied'), ('temporal', 'Fully Satisfied'))}"
    assert parse_reply(text, IDS).verdicts["accuracy"][0] == "Fully Satisfied"


def test_a_revised_second_answer_is_ambiguous_not_the_last_one_winning():
    first = reply(("accuracy", "Not Satisfied"), ("temporal", "Not Satisfied"))
    last = reply(("accuracy", "Fully Satisfied"), ("temporal", "Partially Satisfied"))
    p = parse_reply(f"{first}\nrevised:\n{last}\n{{broken", IDS)
    assert p.verdicts == {} and not p.ok
    assert all("2 verdicts in the reply" in x for x in p.problems) and len(p.problems) == 2


def test_a_trailing_quoted_verdict_does_not_flip_the_criterion():
    """The user's report: a quoted ``{"id": "accuracy", "verdict": "Fully Satisfied"}`` after the real
    verdicts used to win (the last object). Now accuracy has two verdicts: a problem, retried."""
    answer = reply(("accuracy", "Not Satisfied"), ("temporal", "Fully Satisfied"))
    quote = json.dumps({"id": "accuracy", "verdict": "Fully Satisfied"})
    p = parse_reply(f"{answer}\nThe report claims accuracy, e.g. {quote}, but the figure is wrong.", IDS)
    assert "accuracy" not in p.verdicts and p.verdicts["temporal"] == ("Fully Satisfied", "r")
    assert p.problems == [
        "criterion 'accuracy': 2 verdicts in the reply ('Not Satisfied', 'Fully Satisfied'); expected one"
    ]


@pytest.mark.parametrize("second", ["Fully Satisfied", "Not Satisfied"])
def test_duplicated_or_conflicting_entries_in_one_answer_are_problems(second):
    p = parse_reply(
        reply(("accuracy", "Not Satisfied"), ("temporal", "Fully Satisfied"), ("accuracy", second)), IDS
    )
    assert set(p.verdicts) == {"temporal"} and len(p.problems) == 1 and "accuracy" in p.problems[0]


def test_nested_objects_do_not_count():
    inner = {"id": "accuracy", "verdict": "Fully Satisfied"}
    text = json.dumps(
        {
            "criteria": [
                {"id": "accuracy", "reasoning": inner, "verdict": "Not Satisfied"},
                {"id": "temporal", "verdict": "Fully Satisfied"},
            ]
        }
    )
    assert parse_reply(text, IDS).verdicts["accuracy"][0] == "Not Satisfied"


def test_missing_and_unknown_are_problems():
    p = parse_reply(reply(("accuracy", "Mostly Satisfied")), IDS)
    assert not p.ok
    assert any("accuracy" in x and "unknown verdict" in x for x in p.problems)
    assert any("temporal" in x and "missing" in x for x in p.problems)


def test_garbage_and_non_text():
    assert parse_reply("I think it is fine.", IDS).problems == ["no JSON object with 'criteria' in the reply"]
    assert not parse_reply(None, IDS).ok
    assert not parse_reply("[1, 2, 3] {}", IDS).ok


def test_other_shapes_are_accepted():
    mapping = json.dumps(
        {"Criteria": {"accuracy": "fully satisfied", "temporal": {"verdict": "not satisfied"}}}
    )
    assert parse_reply(mapping, IDS).ok
    ids_as_keys = json.dumps(
        {
            "criteria": [
                {"ID": "accuracy", "Verdict": "Fully Satisfied"},
                {"criterion": "temporal", "verdict": "Not Satisfied"},
            ]
        }
    )
    assert parse_reply(ids_as_keys, IDS).ok


def test_unexpected_ids_are_ignored():
    p = parse_reply(
        reply(("accuracy", "Fully Satisfied"), ("temporal", "Fully Satisfied"), ("bonus", "Fully Satisfied")),
        IDS,
    )
    assert p.ok and set(p.verdicts) == set(IDS)


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("Fully Satisfied", "Fully Satisfied"),
        (" fully-satisfied. ", "Fully Satisfied"),
        ("NOT_SATISFIED", "Not Satisfied"),
        ("Satisfied", None),
        (1, None),
    ],
)
def test_normalize_verdict(raw, norm):
    assert normalize_verdict(raw) == norm


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=600))
def test_arbitrary_text_never_raises(text):
    p = parse_reply(text, IDS)
    assert set(p.verdicts) <= set(IDS)
    assert p.ok == (set(p.verdicts) == set(IDS))


json_ish = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.text(max_size=10),
        st.sampled_from(["Fully Satisfied", "accuracy", "temporal"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["id", "verdict", "criteria", "reasoning", "x"]), inner, max_size=4),
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(json_ish, st.text(max_size=40), st.text(max_size=40))
def test_arbitrary_json_in_prose_never_raises(obj, before, after):
    p = parse_reply(before + json.dumps(obj) + after, IDS)
    assert all(
        v in ("Fully Satisfied", "Partially Satisfied", "Not Satisfied") for v, _ in p.verdicts.values()
    )


def test_pathological_braces_are_bounded():
    assert not parse_reply("{" * 100_000, IDS).ok
    assert not parse_reply("[" * 50_000 + "{", IDS).ok
