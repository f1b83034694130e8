"""YAML inputs are bounded, an empty config is no config, and ``--set`` errors name the ``--set``.

- A rubric, training config or env.yaml over ``MAX_YAML_BYTES`` (1 MiB) is refused by its size,
  before it is read: a 200 MB file costs neither its 200 MB of memory nor minutes of parsing (before
  the cap: 790 MB of RSS after two minutes); ``/dev/zero`` stops at the cap.
- An empty config file (or ``/dev/null``) is an error naming it and ``--defaults``; with
  ``--defaults`` (and no config at all) every default is used.
- ``--set steps=abc`` blames ``--set steps=abc``, not the line of ``steps`` in the file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.errors import ConfigError
from agentrl.judge import load_rubric
from agentrl.train.config import load_train_config
from agentrl.yamlload import MAX_YAML_BYTES
from tests.robustness.cli_run import agentrl

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def _sparse(path: Path, size: int, head: str = "id: x\n") -> Path:
    """A file of ``size`` bytes that starts with ``head`` (the rest a hole: no disk, no time)."""
    path.write_text(head)
    with open(path, "r+b") as f:
        f.truncate(size)
    return path


_LOADERS = {
    "rubric": "from agentrl.judge import load_rubric as load",
    "config": "from agentrl.train.config import load_train_config as load",
    "env": "from agentrl.env.config import read_env_yaml as load",
}
_PROBE = """
import json, resource, sys, time, tracemalloc
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # a regression fails here, not the machine
{loader}
import agentrl.yamlload  # imported before the measurement (read_env_yaml imports it when called)
tracemalloc.start()
t0 = time.perf_counter()
try:
    load(sys.argv[1])
    out = {{"error": None}}
except BaseException as e:
    out = {{"error": type(e).__name__, "message": str(e)}}
out |= {{"seconds": time.perf_counter() - t0, "peak": tracemalloc.get_traced_memory()[1]}}
print(json.dumps(out))
"""


def _load(kind: str, path: Path) -> dict:
    """Load ``path`` with the ``kind`` loader in a fresh interpreter capped at 2 GiB of address
    space; its error (type and message), seconds and peak bytes allocated."""
    code = _PROBE.format(loader=_LOADERS[kind])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.splitlines()[-1])


@pytest.mark.parametrize("size", [MAX_YAML_BYTES + 1, 200 * 10**6], ids=["just-over", "200MB"])
def test_an_oversized_rubric_or_config_is_refused_unread(tmp_path, size):
    for name, kind, error in (
        ("r.yaml", "rubric", "RubricError"),
        ("c.yaml", "config", "ConfigError"),
        ("env.yaml", "env", "ConfigError"),
    ):
        path = _sparse(tmp_path / name, size)
        got = _load(kind, path)
        assert got["error"] == error, got
        assert (
            got["message"].startswith(f"{path}: ")
            and "over the 1 MiB limit of a YAML input" in got["message"]
        )
        assert got["seconds"] < 1.0, (name, got)
        assert got["peak"] < 256 * 1024, (name, got)  # never read: the size alone decides


def test_a_device_that_never_ends_stops_at_the_cap():
    got = _load("rubric", Path("/dev/zero"))  # before the cap: read until the memory ran out
    assert got["error"] == "RubricError" and "over the 1 MiB limit" in got["message"], got
    assert got["seconds"] < 2.0 and got["peak"] < 3 * MAX_YAML_BYTES, got


def test_yaml_under_the_cap_still_loads(tmp_path):
    rubric = tmp_path / "r.yaml"
    filler = "# " + "x" * 1000 + "\n"
    rubric.write_text(
        filler * 900
        + "id: big\ncriteria:\n  - {id: a, text: t, weight: 1, grader: {type: contains, text: a}}\n"
    )
    assert MAX_YAML_BYTES // 2 < rubric.stat().st_size < MAX_YAML_BYTES
    assert load_rubric(rubric).id == "big"


@pytest.mark.parametrize("text", ["", "# only a comment\n", "{}\n"], ids=["empty", "comment", "empty-map"])
def test_an_empty_config_is_an_error_unless_defaults(tmp_path, text):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{cfg}: the config is empty .*--defaults"):
        load_train_config(cfg)
    assert load_train_config(cfg, allow_empty=True).steps == 20


def test_dev_null_as_config_starts_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t0 = time.perf_counter()
    rc, err = agentrl(
        capsys, "train", "/dev/null", "--set", "steps=0", "--set", "sft_steps=0", "--no-progress"
    )
    assert rc == 1 and len(err) == 1, err
    assert (
        err[0].startswith("agentrl train: error: /dev/null: the config is empty") and "--defaults" in err[0]
    )
    assert time.perf_counter() - t0 < 10 and not (tmp_path / "runs").exists()


def test_defaults_flag_gives_every_default(capsys):
    for argv in (
        ["train", "--defaults", "--print-config"],
        ["train", "/dev/null", "--defaults", "--print-config"],
    ):
        capsys.readouterr()
        from agentrl.cli import main

        assert main(argv) == 0
        assert "output_dir: runs/train" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("steps=abc", "--set steps=abc: steps: Input should be a valid integer"),
        ("stepz=1", "--set stepz=1: stepz: not a setting; did you mean 'steps'?"),
        # a setting of another section: its whole path
        ("max_turn=3", "--set max_turn=3: max_turn: not a setting; did you mean 'rollout.max_turns'?"),
        (
            "rollout.context.trigger_tokens=5000",
            "--set rollout.context.trigger_tokens=5000: rollout: context.trigger_tokens (5000) is above "
            "max_len (1536)",
        ),
        ("rollout.max_turns=0", "--set rollout.max_turns=0: rollout.max_turns: Input should be greater than"),
        (
            "model.path=./no-such-model",
            "--set model.path=./no-such-model: model.path './no-such-model': not found",
        ),
    ],
)
def test_a_bad_set_is_named_not_the_file(capsys, override, named):
    rc, err = agentrl(capsys, "train", QUICKSTART, "--set", override, "--print-config")
    assert rc == 1 and len(err) == 1, err
    assert err[0].startswith(f"agentrl train: error: {named}"), err[0]
    assert "quickstart.yaml" not in err[0]


def test_a_bad_value_in_the_file_is_still_named_at_its_line(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("steps: 3\nseed: abc\n")
    with pytest.raises(ConfigError, match=rf"^{cfg}:2:1: seed: "):
        load_train_config(cfg, {"steps": 4})


def test_every_config_problem_is_named_at_once_with_the_nearest_setting(tmp_path):
    """Two typos, a key like no setting and a bad value: four lines in one error, each with its file
    position; a near miss of a key names the setting meant, a key like no setting gets no guess."""
    from agentrl.errors import ConfigError
    from agentrl.train.config import load_train_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text("rollout:\n  max_turn: 3\nstpes: 4\nalgorithm:\n  name: grpo\n  zzzz: 1\nseed: x\n")
    with pytest.raises(ConfigError) as err:
        load_train_config(cfg)
    lines = str(err.value).splitlines()
    assert lines[0] == "4 problems in the config:"
    assert f"{cfg}:2:3: rollout.max_turn: not a setting; did you mean 'max_turns'?" in lines
    assert f"{cfg}:3:1: stpes: not a setting; did you mean 'steps'?" in lines
    assert f"{cfg}:6:3: algorithm.zzzz: not a setting" in lines
    assert any(x.startswith(f"{cfg}:7:1: seed: ") for x in lines)
    # one problem: one line, as before
    cfg.write_text("stpes: 4\n")
    with pytest.raises(ConfigError) as err:
        load_train_config(cfg)
    assert str(err.value) == f"{cfg}:1:1: stpes: not a setting; did you mean 'steps'?"


def test_settings_at_walks_into_sections():
    from agentrl.train.config import TrainConfig
    from agentrl.train.config_errors import settings_at

    assert "max_turns" in settings_at(TrainConfig, ("rollout",)) and "steps" in settings_at(TrainConfig, ())
    assert settings_at(TrainConfig, ("steps",)) == [] and settings_at(TrainConfig, ("nope",)) == []
