"""``requires`` (validated, applied once in ``breakdown``) and the evidence graders, which read what
the agent did: the pages it opened and the tool results it saw."""

from __future__ import annotations

import pytest

from agentrl.errors import RubricError
from agentrl.judge import evidence_of, parse_rubric, score_deterministic
from agentrl.judge.evidence import figures, normalize_url
from tests.judge.conftest import make_trajectory

URL = "https://ir.acme.example/news/2024-q1-results"
PAGE = f"Title: Acme Q1 2024\nURL: {URL}\nPage 1 of 1\n\nTotal revenue was $40.2 billion. Cloud revenue was $12.3 billion."
GOOD = f"In Q1 2024 Acme's Cloud revenue was $12.3 billion \\cite{{{URL}}}."


def rubric(**over):
    crit = [
        {
            "id": "accuracy",
            "text": "a",
            "weight": 1.0,
            "grader": {"type": "figure", "value": 12.3, "unit": "billion"},
        },
        {
            "id": "temporal",
            "text": "t",
            "weight": 1.0,
            "grader": {"type": "regex", "pattern": r"\bQ1 2024\b"},
            "requires": ["accuracy"],
        },
        {
            "id": "citation",
            "text": "c",
            "weight": 0.5,
            "grader": {"type": "cited_source", "sources": {"acme-q1-2024": URL}},
            "requires": ["accuracy"],
        },
    ]
    return parse_rubric({"id": "r", "criteria": crit, **over})


def score(report: str, pages: list[str] | None = None, urls: list[str] | None = None):
    traj = make_trajectory(report, sources=pages or [], urls=urls)
    return score_deterministic(rubric(), report, evidence=evidence_of(traj))


def verdicts(bd) -> dict[str, str]:
    return {c.id: c.verdict for c in bd.criteria}


# ---- requires -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requires", "message"),
    [
        ({"temporal": ["nope"]}, r"criteria\[1\]\.requires: unknown criterion 'nope'"),
        (
            {"temporal": ["citation"], "citation": ["temporal"]},
            r"criteria\[1\]\.requires: cycle temporal -> citation -> temporal",
        ),
        ({"accuracy": ["accuracy"]}, r"criteria\[0\]\.requires: cycle accuracy -> accuracy"),
        ({"accuracy": ["rumor"]}, r"criteria\[0\]\.requires: 'rumor' is a negative criterion"),
    ],
)
def test_requires_is_validated_with_one_line_naming_the_field(requires, message):
    lines = ["id: r", "criteria:"]
    for cid, w in (("accuracy", 1), ("temporal", 1), ("citation", 0.5), ("rumor", -1)):
        kind = ", kind: negative" if w < 0 else ""
        req = f", requires: [{', '.join(requires[cid])}]" if cid in requires else ""
        lines.append(
            f"  - {{id: {cid}, text: x, weight: {w}{kind}{req}, grader: {{type: contains, text: x}}}}"
        )
    with pytest.raises(RubricError, match=message) as e:
        parse_rubric("\n".join(lines) + "\n", source="r.yaml")
    assert str(e.value).startswith("r.yaml:") and "\n" not in str(e.value)


def test_a_criterion_counts_only_when_what_it_requires_holds():
    # the period label alone (the old shortcut: temporal without accuracy) earns nothing
    bd = score("Q1 2024 results \\cite{acme-q1-2024}.", [PAGE], [URL])
    assert bd.total == 0.0
    assert verdicts(bd) == {
        "accuracy": "Not Satisfied",
        "temporal": "Not Satisfied",
        "citation": "Not Satisfied",
    }
    assert "requires accuracy" in bd.criteria[1].reasoning
    good = score(GOOD, [PAGE], [URL])
    assert good.total == 2.5 and set(verdicts(good).values()) == {"Fully Satisfied"}


def test_requires_is_transitive_and_applies_to_llm_verdicts_too():
    from agentrl.judge import breakdown
    from agentrl.trajectory import CriterionScore

    r = parse_rubric(
        {
            "id": "chain",
            "criteria": [
                {"id": "a", "text": "a", "weight": 1.0},
                {"id": "b", "text": "b", "weight": 1.0, "requires": ["a"]},
                {"id": "c", "text": "c", "weight": 1.0, "requires": ["b"]},
            ],
        }
    )
    graded = [
        CriterionScore(id=i, verdict=v, score=1.0 if v == "Fully Satisfied" else 0.0, weight=1.0)
        for i, v in (("a", "Not Satisfied"), ("b", "Fully Satisfied"), ("c", "Fully Satisfied"))
    ]
    assert breakdown(r, graded).total == 0.0  # c needs b, b needs a
    graded[0] = CriterionScore(id="a", verdict="Fully Satisfied", score=1.0, weight=1.0)
    assert breakdown(r, graded).total == 3.0


# ---- cited_source ---------------------------------------------------------------------------------


def test_a_citation_counts_only_for_a_page_opened_in_the_episode():
    assert verdicts(score(GOOD, [PAGE], [URL]))["citation"] == "Fully Satisfied"
    # the same report, the page never opened (only searched for, or not at all)
    assert verdicts(score(GOOD))["citation"] == "Not Satisfied"
    assert (
        verdicts(score(GOOD, [PAGE.replace(URL, "https://other.example/x")], ["https://other.example/x"]))[
            "citation"
        ]
        == "Not Satisfied"
    )
    # an id the rubric maps to the opened page works like its URL; an unknown id does not
    by_id = GOOD.replace(URL, "acme-q1-2024")
    assert verdicts(score(by_id, [PAGE], [URL]))["citation"] == "Fully Satisfied"
    assert verdicts(score(GOOD.replace(URL, "acme-q2-2024"), [PAGE], [URL]))["citation"] == "Not Satisfied"
    # one citation of an unopened page among good ones spoils it
    two = GOOD + " See also \\cite{https://never.example/opened}."
    assert verdicts(score(two, [PAGE], [URL]))["citation"] == "Not Satisfied"


def test_an_error_observation_is_not_an_opened_page():
    assert verdicts(score(GOOD, ["Error: 404 not found"], [URL]))["citation"] == "Not Satisfied"
    # a figure-free citation of a URL whose opening failed, beside a good one
    missing = "https://ir.acme.example/news/2024-q2-results"
    report = GOOD + f" Q2 2024 is not out yet \\cite{{{missing}}}."
    assert (
        verdicts(score(report, [PAGE, "Error: 404 not found"], [URL, missing]))["citation"] == "Not Satisfied"
    )
    assert verdicts(score(report, [PAGE, PAGE.replace(URL, missing)], [URL, missing]))["citation"] == (
        "Fully Satisfied"
    )


def test_the_cited_page_must_print_the_cited_figure():
    from agentrl.judge.evidence import cited_source_holds

    wrong_page = PAGE.replace("$12.3 billion", "$9.9 billion")
    bd = score(GOOD, [wrong_page], [URL])
    assert verdicts(bd)["citation"] == "Not Satisfied"
    # the grader itself, without the requirement on accuracy
    grader = rubric().criteria[2].grader
    seen_wrong = evidence_of(make_trajectory(GOOD, sources=[wrong_page], urls=[URL]))
    seen_right = evidence_of(make_trajectory(GOOD, sources=[PAGE], urls=[URL]))
    assert not cited_source_holds(grader, GOOD, seen_wrong)
    assert cited_source_holds(grader, GOOD, seen_right)
    # a figure the page prints, but not the asked one: the citation holds, accuracy does not, and the
    # citation requires accuracy
    other = GOOD.replace("$12.3 billion", "$40.2 billion")
    bd = score(other, [PAGE], [URL])
    assert verdicts(bd) == {
        "accuracy": "Not Satisfied",
        "temporal": "Not Satisfied",
        "citation": "Not Satisfied",
    }
    assert "graded Fully Satisfied" in bd.criteria[2].reasoning
    # a citation that carries no figure at all does not show the page supports anything
    assert (
        verdicts(score(f"\\cite{{{URL}}} Cloud revenue was $12.3 billion in Q1 2024.", [PAGE], [URL]))[
            "citation"
        ]
        == "Not Satisfied"
    )


# ---- figure ------------------------------------------------------------------------------------------


def test_several_figures_for_the_asked_quantity_earn_no_accuracy():
    spray = ", ".join(f"${i / 10:.1f} billion" for i in range(1, 1000))
    report = f"In Q1 2024 Acme's Cloud revenue was {spray} \\cite{{{URL}}}."
    assert verdicts(score(report, [PAGE], [URL]))["accuracy"] == "Not Satisfied"
    hedge = f"In Q1 2024 Cloud revenue was $12.3 billion or maybe $13.1 billion \\cite{{{URL}}}."
    assert verdicts(score(hedge, [PAGE], [URL]))["accuracy"] == "Not Satisfied"
    # another figure the agent found in its sources is not a guess: the total revenue next to it
    both = f"In Q1 2024 total revenue was $40.2 billion and Cloud revenue $12.3 billion \\cite{{{URL}}}."
    assert score(both, [PAGE], [URL]).total == 2.5
    # far from the asked figure (another quantity), a figure is not a competing estimate
    far = f"In Q1 2024 Cloud revenue was $12.3 billion \\cite{{{URL}}}; the market is worth $900 billion."
    assert verdicts(score(far, [PAGE], [URL]))["accuracy"] == "Fully Satisfied"


def test_the_figure_must_come_from_a_tool_result():
    assert verdicts(score(GOOD))["accuracy"] == "Not Satisfied"  # right, but never seen: no reward
    assert verdicts(score(GOOD, [PAGE], [URL]))["accuracy"] == "Fully Satisfied"
    unsourced = rubric().model_dump()
    unsourced["criteria"][0]["grader"]["sourced"] = False
    assert score_deterministic(parse_rubric(unsourced), GOOD).criteria[0].verdict == "Fully Satisfied"


def test_figures_and_urls_are_read_loosely_but_only_amounts_count():
    assert figures("Q1 2024: $12.3 billion, 12.3bn, €5m, 12,300 million; 28% and March 31") == [
        12.3e9,
        12.3e9,
        5e6,
        12.3e9,
    ]
    assert (
        normalize_url("HTTPS://www.Acme.example/a/#x") == normalize_url("acme.example/a") == "acme.example/a"
    )


def test_a_hostile_report_is_graded_in_linear_time():
    import time

    r = rubric()
    ev = evidence_of(make_trajectory(GOOD, sources=[PAGE], urls=[URL]))
    for report in ("1" * 200_000, "$1," * 70_000, "\\cite{" * 50_000 + "}", "$12.3 billion " * 20_000):
        t0 = time.perf_counter()
        score_deterministic(r, report, evidence=ev)
        assert time.perf_counter() - t0 < 2.0


def test_the_opened_flag_leaves_the_hash_of_a_rubric_that_does_not_use_it():
    """Verdict caches and stored trajectories name rubrics by hash: a field added to the figure
    grader changes no hash at its default, and changes it when set."""
    import hashlib
    import json

    from agentrl.judge.rubric import Rubric

    data = {
        "id": "r",
        "criteria": [
            {
                "id": "a",
                "text": "the figure",
                "weight": 1.0,
                "grader": {"type": "figure", "value": 12.3, "unit": "billion"},
            }
        ],
    }
    plain = Rubric.model_validate(data)
    dump = plain.model_dump(mode="json")
    dump["criteria"][0]["grader"].pop("opened")
    before = hashlib.sha256(json.dumps(dump, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert plain.content_hash == before
    data["criteria"][0]["grader"]["opened"] = True
    assert Rubric.model_validate(data).content_hash != before
