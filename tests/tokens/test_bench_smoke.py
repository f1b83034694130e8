"""The expander benchmark runs (tiny sizes; the figures themselves live in BENCHMARKS.md)."""

from __future__ import annotations

from tests.bench.expander import main


def test_benchmark_runs_and_renders_are_linear(capsys) -> None:  # type: ignore[no-untyped-def]
    out = main(["--turns", "16", "--tool-chars", "200", "--repeat", "1"])
    assert out["renders_16"] == 2 * 16 + 2 and out["renders_8"] == 2 * 8 + 2
    assert "naive" in capsys.readouterr().out
