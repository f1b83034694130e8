"""Whether RL can learn from what the policy samples: the step's health metrics and the warnings."""

from __future__ import annotations

import subprocess
import sys

import yaml

from agentrl.train.health import HealthWatch, health_metrics
from agentrl.trajectory import RewardBreakdown, Trajectory
from tests.train.learning_signal import config_dict


def _traj(task: str, total: float, **info) -> Trajectory:
    reward = RewardBreakdown(total=total, normalized=total)
    return Trajectory(id=f"{task}#{len(info)}", task_id=task, messages=[], reward=reward, info=info)


def test_health_metrics_count_calls_pages_and_groups():
    log_ok = {"tool": "open_url", "ok": True}
    log_404 = {"tool": "open_url", "ok": False}
    trajs = [
        _traj("a", 1.0, tool_calls=2, tool_log=[{"tool": "search", "ok": True}, log_ok]),
        _traj("a", 0.0, tool_calls=1, format_errors=2, tool_log=[log_404]),
        _traj("b", 0.0, tool_calls=0, arg_errors=1, unknown_tools=1),
        _traj("b", 0.0, tool_calls=1, tool_log=[log_404]),
        _traj("c", 0.5),  # a group of one: no GRPO group
    ]
    m = health_metrics(trajs)
    assert m["env/tool_call_valid"] == 4 / 8  # 4 calls ran, 4 refused
    assert m["env/open_url_ok"] == 1 / 3
    assert m["train/groups_without_signal"] == 1 / 2  # b's rewards are equal, a's differ
    assert health_metrics([]) == {}


def test_the_watch_warns_about_a_weak_start_once_and_about_long_silence():
    watch = HealthWatch(window=3)
    first = watch.check(
        {"env/tool_call_valid": 0.2, "env/open_url_ok": 0.9, "train/groups_without_signal": 1.0}
    )
    assert len(first) == 1 and "20% of its tool calls ran" in first[0] and "no GRPO signal" in first[0]
    assert "URLs" not in first[0]
    assert watch.check({"train/groups_without_signal": 1.0}) == []
    third = watch.check({"train/groups_without_signal": 1.0})
    assert len(third) == 1 and "3 steps in a row without a learning signal" in third[0]
    assert watch.check({"train/groups_without_signal": 1.0}) == []  # said once per stretch
    good = HealthWatch(window=3)
    assert (
        good.check({"env/tool_call_valid": 0.9, "env/open_url_ok": 0.8, "train/groups_without_signal": 0.2})
        == []
    )


def test_a_run_from_an_untrained_policy_logs_the_metrics_and_warns(tmp_path):
    # no warm start, the judge's rubric out of reach: every reward equal, every group silent
    data = config_dict(sft_steps=0, steps=1, output_dir=str(tmp_path / "run"))
    data["judge"] = {}
    data["model"] = {"path": "tiny:layers=1,hidden=32,heads=2,kv_heads=1", "tokenizer_vocab_size": 300}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(data))
    done = subprocess.run(
        [sys.executable, "-m", "agentrl", "train", str(tmp_path / "cfg.yaml"), "--no-progress"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "warning: the policy RL starts from is weak" in done.stderr
    row = [line for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if line][-1]
    assert '"train/groups_without_signal": 1.0' in row
