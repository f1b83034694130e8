"""``agentrl explain --arrays``: the token table of docs/reference-cases.md §1 and §2, JSON output, bad input."""

import json
import re
from pathlib import Path

import pytest

from agentrl.cli import main

ROOT = Path(__file__).resolve().parents[2]
ONE_PLUS_ONE = ROOT / "examples" / "one_plus_one.json"

REF = {  # docs/reference-cases.md §1
    "reward": [-0.010, -0.005, 0.005, -0.010, -0.020, 0.995],
    "value": [0.20, 0.25, 0.30, 0.35, 0.45, 0.60],
    "δ": [0.040, 0.045, 0.055, 0.090, 0.130, 0.395],
    "advantage": [0.6210805, 0.6116637, 0.5964881, 0.5699875, 0.5052500, 0.3950000],
    "return": [0.8210805, 0.8616637, 0.8964881, 0.9199875, 0.9552500, 0.9950000],
    "whitened": [0.82241, 0.71359, 0.53823, 0.23199, -0.51610, -1.79012],
}


def _table(capsys, *args):
    assert main(["explain", *args]) == 0
    out = capsys.readouterr().out.splitlines()
    header_i = next(i for i, line in enumerate(out) if line.startswith("t "))
    header = out[header_i].split()
    rows = [line.split() for line in out[header_i + 2 :] if re.match(r"^\d+ ", line)]
    return out, header, rows


def test_one_plus_one_table_matches_reference_to_four_decimals(capsys):
    out, header, rows = _table(capsys, "--arrays", str(ONE_PLUS_ONE))
    assert out[0].startswith("legend: ") and "includes r_t" in out[0] and "before whitening" in out[0]
    assert header == [
        "t",
        "token",
        "mask",
        "score",
        "KL",
        "reward",
        "value",
        "δ",
        "advantage",
        "return",
        "whitened",
    ]
    assert [r[1] for r in rows] == ["是", "的", "，", "等于", "2", "！"]
    for col, expected in REF.items():
        i = header.index(col)
        got = [float(r[i]) for r in rows]
        assert got == pytest.approx(expected, abs=0.6e-4), col


def test_one_plus_one_json(capsys):
    assert main(["explain", "--arrays", str(ONE_PLUS_ONE), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["token_level_rewards"] == pytest.approx(REF["reward"], abs=1e-12)
    assert d["advantages"] == pytest.approx(REF["advantage"], abs=1e-7)
    assert d["returns"] == pytest.approx(REF["return"], abs=1e-7)
    assert d["advantages_whitened"] == pytest.approx(REF["whitened"], abs=1e-5)
    assert d["whiten_mean"] == pytest.approx(0.5499116, abs=1e-7)
    assert d["whiten_var"] == pytest.approx(0.0074886, abs=1e-7)


def test_multi_turn_hole_shows_masked_rows(capsys):
    _, header, rows = _table(capsys, "--arrays", str(ROOT / "examples" / "multi_turn_hole.json"))
    adv = header.index("advantage")
    assert [r[adv] for r in rows] == ["0.7997", "0.7365", "–", "–", "–", "0.6700", "0.6000", "–"]


def _write(tmp_path, **d):
    p = tmp_path / "a.json"
    p.write_text(json.dumps(d))
    return str(p)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"response_mask": [1, 1], "values": [0, 0]}, "give either token_level_rewards"),
        ({"response_mask": [1, 1], "token_level_rewards": [0, 1], "values": [0]}, "values has 1 entries"),
        (
            {"response_mask": [1, 0], "token_level_rewards": [0, 1], "values": [None, 0]},
            r"values\[0\] is null",
        ),
        ({"response_mask": [1, 2], "token_level_rewards": [0, 1]}, "0 or 1"),
        (
            {"response_mask": [1], "token_level_scores": [1], "kl": [0.1]},
            "kl and beta must be given together",
        ),
        ({"response_mask": [1], "token_level_rewards": [1], "gamma": 2}, "gamma and lam"),
        ({"response_mask": [1], "token_level_rewards": [1], "lambda": 0.9}, "lambda: Extra inputs"),
    ],
)
def test_bad_input_is_one_readable_line(tmp_path, capsys, data, message):
    assert main(["explain", "--arrays", _write(tmp_path, **data)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert re.search(message, err), err
    assert "a.json" in err


def test_missing_and_malformed_files(tmp_path, capsys):
    assert main(["explain", "--arrays", str(tmp_path / "nope.json")]) == 1
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["explain", "--arrays", str(bad)]) == 1
    assert "not valid JSON" in capsys.readouterr().err


def test_values_may_be_omitted_for_a_grpo_view(tmp_path, capsys):
    path = _write(tmp_path, response_mask=[1, 1, 0], token_level_rewards=[0, 1, 0], gamma=1.0, lam=1.0)
    _, header, rows = _table(capsys, "--arrays", path)
    assert [r[header.index("advantage")] for r in rows] == ["1.0000", "1.0000", "–"]
