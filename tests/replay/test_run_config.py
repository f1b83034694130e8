"""Replay and explain read a run's config back as the trainer's ``TrainConfig``
(``agentrl.train.run_config``): a run written by an older agentrl still loads (fields added since
take their defaults, a key that is no longer a setting is dropped with a note), and the algorithm,
``judge.normalize`` and ``rollout.max_len`` they rebuild with are the run's, not defaults restated
by replay."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from agentrl.cli import main
from agentrl.errors import ConfigError
from agentrl.replay import resolve_settings
from agentrl.rundir import RunDir
from agentrl.train.config import TrainConfig
from agentrl.train.run_config import load_run_config

OLD = {
    k: v
    for k, v in json.loads((Path(__file__).parent / "data" / "old_run_configs.json").read_text()).items()
    if not k.startswith("_")
}
#: What the oldest version wrote that is no longer a setting (renamed ``rollout.env_workers``).
GONE = {"5fa6db4": ["rollout.concurrency"], "9e439d1": []}


def _leaves(data: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[tuple[str, ...], Any] = {}
    for k, v in data.items():
        out |= _leaves(v, (*prefix, k))
    return out


def _run(tmp_path: Path, config: dict[str, Any]) -> RunDir:
    run = RunDir(tmp_path / "run")
    run.path.mkdir(parents=True)
    run.write_config(config)
    return run


@pytest.mark.parametrize("version", sorted(OLD))
def test_a_run_written_by_an_older_version_loads_with_its_values(tmp_path, version):
    run = _run(tmp_path, OLD[version])
    cfg, notes = load_run_config(run)
    assert notes == [
        f"{run.config_file}: {key} is no longer a setting (written by an older agentrl; ignored)"
        for key in GONE[version]
    ]
    now = _leaves(cfg.model_dump(mode="json"))
    for path, value in _leaves(OLD[version]).items():
        if ".".join(path) not in GONE[version]:
            assert now[path] == value, path
    # Fields added since take today's defaults.
    defaults = _leaves(TrainConfig().model_dump(mode="json"))
    assert {p: now[p] for p in defaults.keys() - _leaves(OLD[version]).keys()} == {
        p: defaults[p] for p in defaults.keys() - _leaves(OLD[version]).keys()
    }


def test_replay_rebuilds_with_the_run_s_settings_not_restated_defaults(tmp_path):
    old = copy.deepcopy(OLD["5fa6db4"])
    old["algorithm"] |= {"name": "ppo", "gamma": 0.9, "lam": 0.8}
    old["judge"]["normalize"] = False
    old["rollout"]["max_len"] = 2048
    run = _run(tmp_path, old)
    settings = resolve_settings(load_run_config(run)[0])
    a = settings.algorithm
    assert (a.name, a.gamma, a.lam, settings.normalize, settings.max_len) == ("ppo", 0.9, 0.8, False, 2048)
    # Without those keys at all: the trainer's defaults, whatever they are today.
    for section, key in (("judge", "normalize"), ("rollout", "max_len"), ("algorithm", "lam")):
        del old[section][key]
    settings = resolve_settings(load_run_config(_run(tmp_path / "b", old))[0])
    default = TrainConfig()
    assert (settings.algorithm.lam, settings.normalize, settings.max_len) == (
        default.algorithm.lam,
        default.judge.normalize,
        default.rollout.max_len,
    )
    # A run's config.yaml, made by hand, is read the same way.
    yaml_run = tmp_path / "c"
    yaml_run.mkdir()
    (yaml_run / "config.yaml").write_text("judge:\n  normalize: false\nrollout:\n  max_len: 512\n")
    settings = resolve_settings(load_run_config(RunDir(yaml_run))[0])
    assert (settings.normalize, settings.max_len) == (False, 512)


def test_a_stored_config_that_does_not_validate_names_the_file_and_field(tmp_path):
    old = copy.deepcopy(OLD["9e439d1"])
    old["rollout"]["max_len"] = "long"
    run = _run(tmp_path, old)
    with pytest.raises(ConfigError) as e:
        load_run_config(run)
    assert str(e.value).startswith(f"{run.config_file}: rollout.max_len: Input should be a valid integer")


def test_replay_cli_reads_an_old_run_and_says_what_it_dropped(recorded, tok_dir, tmp_path, capsys):
    traj, _ = recorded
    old = copy.deepcopy(OLD["5fa6db4"])
    old["algorithm"] |= {"name": "ppo", "lam": 0.8}
    run = _run(tmp_path, old)
    out = tmp_path / "t.pt"
    argv = ["replay", str(traj), "--run", str(run.path), "--tokenizer", str(tok_dir), "--tensors", str(out)]
    assert main([*argv, "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["tensors"]
    assert (got["algorithm"], got["lam"]) == ("ppo", 0.8)
    assert got["notes"][0] == (
        f"{run.config_file}: rollout.concurrency is no longer a setting (written by an older agentrl; ignored)"
    )
