"""The report's "Research or recall" section: the shares of ``agentrl.eval.research`` for the run's
evaluation before RL, its last evaluation, and its first and last RL steps, on a run directory built
by hand from episodes whose shares are counted in ``tests/eval/fixtures.py`` (no training: only the
files the section reads, and a metrics row)."""

from __future__ import annotations

import json
import re
from html import unescape

from agentrl.cli import main
from agentrl.rundir import RunDir
from agentrl.trajectory import write_trajectories
from tests.eval.fixtures import recalling, researching, wandering


def _run(path):
    """Evaluations at steps 0, 2 and 4 (the last), RL steps 1 to 3; what the section leaves out
    (evaluation 2, step 2) would change every row it could be mistaken for."""
    run = RunDir(path)
    files = {
        run.eval_file(0): [recalling(task="a"), recalling(task="b")],
        run.eval_file(2): [researching(task="a")],
        run.eval_file(4): [researching(task="a"), recalling(task="b")],
        run.trajectory_file(1): [researching(task="x"), wandering(task="y")],
        run.trajectory_file(2): [recalling(task="x")],
        run.trajectory_file(3): [researching(task="x", sample=s) for s in range(3)],
    }
    for f, trajs in files.items():
        f.parent.mkdir(parents=True, exist_ok=True)
        write_trajectories(f, trajs)
    (path / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
    return path


def _section_rows(html: str) -> list[list[str]]:
    section = re.search(r'<section id="research">(.*?)</section>', html, re.S)
    assert section, "no research section"
    rows = re.findall(r"<tr>(.*?)</tr>", section.group(1), re.S)
    return [
        [unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", r)] for r in rows
    ]


def test_the_report_shows_research_or_recall_of_evaluations_and_first_and_last_steps(tmp_path, capsys):
    run = _run(tmp_path / "run")
    out = tmp_path / "r.html"
    assert main(["report", str(run), "-o", str(out)]) == 0
    html = out.read_text()
    assert _section_rows(html) == [
        ["episodes of", "episodes", "searches naming the subject", "opened URLs from a tool result",
         "answer figures on an opened page"],
        ["evaluation before RL", "2", "0/2 (0%)", "0/2 (0%)", "0/2 (0%)"],
        ["evaluation after step 4", "2", "1/2 (50%)", "1/2 (50%)", "1/2 (50%)"],
        # researching + wandering: searches 1 + 1 of 1 + 2, URLs 2 of 2, answers 1 of 1
        ["RL step 1 (first), training tasks", "2", "2/3 (67%)", "2/2 (100%)", "1/1 (100%)"],
        ["RL step 3 (last), training tasks", "3", "3/3 (100%)", "3/3 (100%)", "3/3 (100%)"],
    ]  # fmt: skip
    assert '<a href="#research">' in html
    # each row names the file it counted, in its tooltip
    assert (
        f'title="{RunDir(run).eval_file(4)}"' in html and f'title="{RunDir(run).trajectory_file(3)}"' in html
    )


def test_a_run_with_only_metrics_says_there_is_nothing_to_count(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "critic/score/mean": 0.5}) + "\n")
    assert main(["report", str(run), "-o", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert _section_rows(html) == []
    assert "No evaluation (eval/) and no RL step's trajectories (trajectories/) are stored." in html
