"""The GPU acceptance kit (tests/gpu, docs/gpu.md). Its dry run — every section's real code path at
tiny shapes on the CPU — is part of the default suite, so the kit cannot rot between the rare runs on
a GPU; the full kit runs only where CUDA is (``-m gpu``, skipped elsewhere). The runner's own
promises are tested with a stub section: a section killed at its budget keeps what it recorded, and
a crash or an exception becomes a failed section with its reason, never a lost report."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.gpu.kit import ORDER, _module, main, run_kit
from tests.gpu.report import Report

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """The whole kit on the CPU. Its sections' budgets are the GPU machine's; a shared 2-core CPU
    (another pytest-xdist worker beside it, spawned ranks importing torch) gets five times as long."""
    out = tmp_path_factory.mktemp("kit")
    budgets = {name: 5 * b for name in ORDER if (b := _module(name).BUDGET_S) is not None}
    return run_kit(out, dry_run=True, device="cpu", budgets=budgets), out


def _section(report: Report, name: str):  # type: ignore[no-untyped-def]
    return next(s for s in report.sections if s.name == name)


def test_the_dry_run_runs_every_section_and_every_check_holds(dry):
    report, _ = dry
    assert [s.name for s in report.sections] == list(ORDER)
    for s in report.sections:
        assert s.status == "ok", (s.name, s.reason)
        assert s.checks and all(c.ok for c in s.checks.values()), s.name
        # a number this run measured (a time, a rate, a difference), not only its settings
        measured = [v for v in s.figures.values() if isinstance(v, float)]
        measured += [
            v for rows in s.tables.values() for r in rows for v in r.values() if isinstance(v, float)
        ]
        assert measured, s.name
        for ref in s.references.values():  # figures measured elsewhere: apart, with their provenance
            assert ref.source and ref.date and ref.machine, s.name
            quoted = {v for v in ref.figures.values() if isinstance(v, float)}
            assert not quoted & set(measured), (s.name, quoted & set(measured))


def test_the_dry_run_measures_what_the_gpu_run_reports(dry):
    report, _ = dry
    step = _section(report, "step")
    rows = step.tables["steps"]
    assert {(r["shape"], r["algo"]) for r in rows} == {
        ("0.5B", "grpo"),
        ("0.5B", "ppo"),
        ("1.5B", "grpo"),
        ("1.5B", "ppo"),
    }
    assert all(r["finite"] and r["weights_moved"] and r["update_tok_s"] > 0 for r in rows)
    assert all(r["sample_tok_s"] > 0 and r["floor_tok_s"] > 0 for r in step.tables["sampling"])
    assert "grad_ckpt_time_ratio" in step.figures
    gap = _section(report, "logprob_gap").tables["gap"]
    assert [r["dtype"] for r in gap] == ["auto", "bfloat16"]
    # float32 on a CPU: the KV-cached sampler and the trainer's forward pass agree to rounding.
    assert gap[0]["max_abs_diff"] < 1e-4 and 0 <= gap[0]["rollout_is_eff_sample_size"] <= 1
    fsdp = _section(report, "fsdp").figures
    assert fsdp["sampled_token_agreement"] == 1.0 and fsdp["step_rel_diff"] < 1e-5
    ranks = {r["mode"]: r for r in _section(report, "ranks").tables["ranks"]}
    assert set(ranks) == {"ddp", "fsdp"} and all(r["step_rel_diff"] < 1e-4 for r in ranks.values())
    served = {r["when"]: r for r in _section(report, "vllm").tables["served"]}
    assert served["after_sync"]["max_abs_diff"] < 1e-4 < served["before_sync"]["max_abs_diff"]
    qs = _section(report, "quickstart").figures
    assert qs["steps_done"] == 2 and qs["complete"] is True and math.isfinite(qs["s_per_step"])
    cpu = _section(report, "quickstart").references["cpu"]  # the CPU run, beside this run's same figures
    assert cpu.figures["steps_done"] == 50 and cpu.figures.keys() <= qs.keys() and cpu.date == "2026-11-30"
    assert all(0 <= qs[k] <= 1 for k in ("eval_before", "eval_after")) and qs["eval_gain_ci"].startswith("[")
    assert _section(report, "device").figures["version/pydantic"] != "not installed"


def test_the_json_and_markdown_reports_hold_the_same_data(dry):
    report, out = dry
    again = Report.model_validate(json.loads((out / "report.json").read_text()))
    assert again == report
    md = (out / "report.md").read_text()
    for s in report.sections:
        assert f"## {s.name}: {s.title}" in md
        assert all(f"| {k} | yes |" in md for k in s.checks)
    assert "| fsdp_step_equals_plain | yes |" in md and "| max_abs_diff |" in md  # a wide table, transposed
    assert (out / "quickstart_reward_curve.png").stat().st_size > 0


def test_a_section_killed_at_its_budget_keeps_its_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_STUB", "sleep")
    stub = "tests.gpu.stub_section"
    report = run_kit(
        tmp_path, dry_run=True, device="cpu", sections=(stub,), budgets={stub: 10.0}, isolate=True
    )
    (s,) = report.sections
    assert s.status == "timeout" and "10 s" in s.reason and s.figures == {"recorded_before": 1.0}
    assert json.loads((tmp_path / "report.json").read_text())["sections"][0]["status"] == "timeout"


@pytest.mark.parametrize(
    ("what", "reason"), [("exit", "exited with code 3"), ("raise", "ValueError: the stub failed")]
)
def test_a_crashed_section_is_failed_with_its_reason(tmp_path, monkeypatch, what, reason):
    monkeypatch.setenv("KIT_STUB", what)
    stub = "tests.gpu.stub_section"
    report = run_kit(
        tmp_path, dry_run=True, device="cpu", sections=(stub, stub), budgets={stub: 60.0}, isolate=True
    )
    for s in report.sections:  # the second ran after the first failed
        assert s.status == "failed" and reason in s.reason and s.figures == {"recorded_before": 1.0}


def test_a_section_that_no_longer_fits_the_budget_is_skipped(tmp_path):
    report = run_kit(tmp_path, dry_run=True, device="cpu", sections=("device",), total_budget=14.0)
    (s,) = report.sections
    assert s.status == "skipped" and "no time left in the kit's budget (9 s)" in s.reason and not s.figures


def test_the_command_line_writes_the_report(tmp_path, capsys):
    assert main(["--dry-run", "--sections", "device", "--out", str(tmp_path)]) == 0
    assert "| device | ok |" in capsys.readouterr().out
    assert json.loads((tmp_path / "report.json").read_text())["mode"] == "dry-run"


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (tools/gpu/run runs the kit there)"
)
def test_the_kit_on_a_gpu(tmp_path):
    assert main(["--out", str(tmp_path)]) == 0, (tmp_path / "report.md").read_text()
