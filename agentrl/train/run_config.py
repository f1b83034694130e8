"""A run's stored config, read back as the ``TrainConfig`` it trained with.

A run directory keeps its config as the agentrl version that ran it wrote it (``config.json``, a
hand-made ``config.yaml``, or the latest checkpoint's; ``agentrl.rundir.RunDir.config``). Read back,
a field added since then takes its default, which is what that version did without the field; a key
that is no longer a setting (``rollout.concurrency``, renamed ``env_workers``) is dropped and named
in a note. Anything else that does not validate is a ``ConfigError`` naming the file and the field.
Replay and explain read a run's algorithm, reward and ``max_len`` from here, so they never restate
the trainer's defaults.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError

from agentrl.errors import ConfigError
from agentrl.rundir import CONFIG_YAML, RunDir
from agentrl.train.config import TrainConfig
from agentrl.yamlload import dotted

__all__ = ["load_run_config", "stored_train_config"]


def stored_train_config(data: dict[str, Any], source: str) -> tuple[TrainConfig, list[str]]:
    """``data`` (a run's stored config mapping) as a ``TrainConfig``, and a note for each key that is
    no longer a setting (dropped). Raises ``ConfigError`` ``SOURCE: field: problem`` otherwise."""
    data = copy.deepcopy(data)
    notes: list[str] = []
    while True:
        try:
            return TrainConfig.model_validate(data), notes
        except ValidationError as e:
            errors = e.errors()
        extra = [tuple(err["loc"]) for err in errors if err["type"] == "extra_forbidden"]
        if len(extra) < len(errors) or not extra:
            err = next(err for err in errors if err["type"] != "extra_forbidden")
            msg = err["msg"].removeprefix("Value error, ")
            raise ConfigError(f"{source}: {dotted(tuple(err['loc']))}: {msg}") from None
        for loc in extra:
            parent: Any = data
            for key in loc[:-1]:
                parent = parent[key]
            del parent[loc[-1]]
            notes.append(
                f"{source}: {dotted(loc)} is no longer a setting (written by an older agentrl; ignored)"
            )


def load_run_config(run: RunDir | None) -> tuple[TrainConfig, list[str]]:
    """The ``TrainConfig`` of the run in ``run`` (every default when it stores none, or for no run),
    with the notes of ``stored_train_config``."""
    if run is None:
        return TrainConfig(), []
    data = run.config()
    if run.config_file.is_file():
        source = str(run.config_file)
    elif (run.path / CONFIG_YAML).is_file():
        source = str(run.path / CONFIG_YAML)
    else:
        source = f"{run.path}: the latest checkpoint's config"
    return stored_train_config(data, source)
