"""The public API of ``agentrl.judge``: the names other modules rely on, and a cheap import."""

from __future__ import annotations

import subprocess
import sys

import agentrl.judge

REQUIRED = {
    "Rubric",
    "Criterion",
    "load_rubric",
    "parse_rubric",
    "score_deterministic",
    "JudgeConfig",
    "Judge",
    "score_trajectories",
    "map_verdict",
    "aggregate",
}


def test_exported_members():
    exported = set(agentrl.judge.__all__)
    assert exported >= REQUIRED
    assert exported == {name for name in dir(agentrl.judge) if not name.startswith("_")} - {
        "agreement",
        "bounds",
        "cache",
        "client",
        "config",
        "credit",
        "evidence",
        "formats",
        "graders",
        "llm",
        "parse",
        "prompt",
        "record",
        "regex_lint",
        "rubric",
        "rubric_lint",
        "score",
        "summary",
    }
    for name in exported:
        assert getattr(agentrl.judge, name) is not None
    from agentrl.judge.score import aggregate, map_verdict

    assert (aggregate, map_verdict) == (agentrl.judge.aggregate, agentrl.judge.map_verdict)


def test_import_is_light_and_layered():
    code = (
        "import sys, agentrl.judge, agentrl.cli.judge, agentrl.cli.rubric\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('litellm', 'torch', 'transformers', 'openai')"
        " or m.startswith(('agentrl.env', 'agentrl.tokens', 'agentrl.algos'))]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_rubric_properties():
    r = agentrl.judge.parse_rubric(
        {
            "id": "r",
            "aggregation": "normalized",
            "criteria": [
                {"id": "a", "text": "t", "weight": 2},
                {"id": "b", "text": "u", "weight": -1, "kind": "negative"},
            ],
        }
    )
    assert (r.max_score, r.min_score, r.is_deterministic) == (1.0, 0.0, False)
    assert r.content_hash == agentrl.judge.parse_rubric(r.model_dump()).content_hash
