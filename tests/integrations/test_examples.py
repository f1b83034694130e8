"""The examples run: TRL's GRPO script trains two steps on CPU with a tiny model; the SkyRL script's
generator, built from its settings file, produces our expander's output; task_data writes the
datasets every engine reads. (verl's example files are checked in test_verl.py.)"""

from __future__ import annotations

import asyncio
import importlib.util
import math
from pathlib import Path

import pytest

from agentrl.integrations import load_settings
from agentrl.integrations.task_data import main as task_data_main
from tests.integrations.helpers import OracleEngine, expected, tasks, tokenizer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trl_example_trains_on_cpu(tmp_path):
    pytest.importorskip("trl", reason="trl is not installed (pip install 'agentrl[trl]')")
    script = _load(EXAMPLES / "trl" / "grpo_trl.py")
    trainer = script.main(
        [
            "--model=tiny:layers=1,hidden=32,heads=2,kv_heads=1",
            "--steps=2",
            "--limit=2",
            "--batch-size=2",
            "--num-generations=2",
            "--max-new-tokens=8",
            "--max-completion-tokens=48",
            f"--output-dir={tmp_path}",
        ]
    )
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and trainer.state.global_step == 2
    assert all(math.isfinite(h["loss"]) and "rewards/agentrl_reward/mean" in h for h in logs)


def test_skyrl_example_generator_hands_over_our_rows():
    pytest.importorskip("skyrl_gym", reason="skyrl-gym is not installed (pip install 'agentrl[skyrl]')")
    from tests.integrations.test_skyrl import FakeClient

    script = _load(EXAMPLES / "skyrl" / "main_agentrl.py")
    settings = load_settings(script.SETTINGS)
    assert settings.judge is None and settings.max_new_tokens == 1024
    gen = script.make_generator(tokenizer(), FakeClient(OracleEngine(tasks())), max_completion_tokens=4096)
    task = tasks()[1]
    out = asyncio.run(gen.generate({"prompts": [[]], "env_extras": [{"task_id": task.id, "seed": 1}]}))
    _, rec, last = expected(gen.episodes[0].trajectory)
    assert out["response_ids"] == [rec.completion_ids[:last]] and out["rewards"] == [
        rec.token_level_scores[:last]
    ]


def test_task_data_writes_each_engines_dataset(tmp_path, capsys):
    pd = pytest.importorskip("pandas", reason="pandas is not installed (every engine extra brings it)")
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (every engine extra brings it)")
    ids = [t.id for t in tasks(3)]
    for engine in ("verl", "trl", "skyrl"):
        task_data_main(["--engine", engine, "--out", str(tmp_path / f"{engine}.parquet"), "--limit", "3"])
        df = pd.read_parquet(tmp_path / f"{engine}.parquet")
        got = [e["task_id"] for e in df["extra_info"]] if engine == "verl" else list(df["task_id"])
        assert got == ids
        assert [m["role"] for m in df["prompt"][0]] == ["system", "user"]
    assert "3 tasks ->" in capsys.readouterr().out
    verl = pd.read_parquet(tmp_path / "verl.parquet")
    assert set(verl["agent_name"]) == {"agentrl_research"}
    assert set(pd.read_parquet(tmp_path / "skyrl.parquet")["env_class"]) == {"agentrl-deep-research"}
