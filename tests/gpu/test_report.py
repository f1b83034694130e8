"""The kit's report keeps what a run measured apart from the figures it compares with: a section's
``references`` (each with its source, date and machine) are never among its ``figures``, survive the
JSON round trip and a partial result file, and the Markdown sets each beside this run's figure of the
same name."""

from __future__ import annotations

import json

import pytest

from tests.gpu.report import Recorder, Reference, Report, SectionResult, load_result, render_markdown
from tests.gpu.sections.quickstart import CPU_REFERENCE

CPU = Reference(
    figures={"wall_s": 427.0, "reward_gain": 0.235, "not_measured_here": float("nan")},
    source="BENCHMARKS.md, a table",
    date="2026-11-24",
    machine="2 CPU cores",
)


def test_a_reference_is_recorded_apart_with_its_provenance(tmp_path):
    path = tmp_path / "section.json"
    rec = Recorder(SectionResult(name="quickstart"), path)
    rec.figures({"wall_s": 61.5, "reward_gain": 0.1})
    rec.reference("cpu", CPU)
    res = rec.result
    assert res.figures == {"wall_s": 61.5, "reward_gain": 0.1}  # only what the run measured
    ref = res.references["cpu"]
    assert (ref.source, ref.date, ref.machine) == ("BENCHMARKS.md, a table", "2026-11-24", "2 CPU cores")
    assert ref.figures["not_measured_here"] == "nan"  # JSON has no NaN, as for figures
    assert load_result(path) == res  # the partial result file holds it too (a section killed later)
    report = Report(mode="dry-run", device="cpu", date="2026-11-27T00:00:00Z", sections=[res])
    report.write(tmp_path)
    assert Report.model_validate(json.loads((tmp_path / "report.json").read_text())) == report
    assert json.loads((tmp_path / "report.json").read_text())["schema_version"] == 2


def test_the_markdown_sets_each_reference_figure_beside_this_runs():
    res = SectionResult(name="quickstart", figures={"wall_s": 61.5, "reward_gain": 0.1})
    res.references["cpu"] = CPU
    md = render_markdown(Report(mode="gpu", device="H200", date="2026-11-27", sections=[res]))
    assert (
        "**reference: cpu** (not measured by this run: BENCHMARKS.md, a table; 2026-11-24; 2 CPU cores)" in md
    )
    assert "| figure | reference | this run |" in md
    assert "| wall_s | 427 | 61.5 |" in md and "| reward_gain | 0.235 | 0.1 |" in md
    assert "| not_measured_here | nan | – |" in md
    figures = md.split("| figure | value |")[1].split("**reference")[0]
    assert "427" not in figures  # the measured table holds no reference figure


def test_the_quickstart_reference_names_the_figures_the_section_measures():
    from agentrl.train.report import summarize_rewards

    measured = set(summarize_rewards([0.1, 0.2, 0.3, 0.4, 0.5])) | {"wall_s", "steps_done"}
    measured |= {"eval_before", "eval_after", "eval_gain"}  # the held-out evaluation (summary.json)
    assert CPU_REFERENCE.figures.keys() <= measured
    assert CPU_REFERENCE.date == "2026-11-30" and "2 CPU cores" in CPU_REFERENCE.machine
    assert "BENCHMARKS.md" in CPU_REFERENCE.source
    cpu = CPU_REFERENCE.figures  # the published gain is last − first (each rounded to 3 places)
    assert cpu["reward_last"] - cpu["reward_first"] == pytest.approx(cpu["reward_gain"], abs=0.001)
