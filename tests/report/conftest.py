"""A real training run for the report tests: the trainer, a tiny model and the sandbox, 2 PPO steps.

The policy is a tiny model trained to answer in a few random words (``tests.answering_model``: a
random one never ends a turn, and a turn cut at the token limit is never a report); the rubric is
deterministic and graded on those answers (vowels, digits, capitals), so rewards differ within a group and the advantages, returns and values are not all zero.
"""

import json
import shutil

import pytest

RUBRIC = """\
id: report-fixture
version: 1
description: Graded on surface features of the text, so that a random policy gets varied rewards.
mapping: strict
aggregation: weighted_sum
criteria:
  - id: vowels
    text: Writes at least three vowels.
    weight: 1.0
    grader: {type: regex, pattern: '[aeiou].*[aeiou].*[aeiou]'}
  - id: digit
    text: Writes a digit.
    weight: 1.0
    grader: {type: regex, pattern: '[0-9]'}
  - id: shouting
    kind: negative
    text: Writes two capitals in a row.
    weight: -0.5
    grader: {type: regex, pattern: '[A-Z]{2}'}
"""


def make_run(out_dir, steps: int = 2) -> None:
    """Train ``steps`` PPO steps of a tiny model into ``out_dir`` (about 10 s on one core)."""
    from agentrl.train import TrainConfig, Trainer
    from tests.answering_model import answering_model_dir

    rubric = out_dir.parent / "fixture_rubric.yaml"
    rubric.write_text(RUBRIC)
    cfg = {
        "model": {"path": str(answering_model_dir())},
        "rollout": {
            "tasks_per_step": 2,
            "group_size": 3,
            "max_turns": 2,
            "max_new_tokens": 24,
            "max_len": 2048,
            "temperature": 1.0,
            "env": {"search_k": 2, "page_chars": 300, "system_prompt": "Today is {date}. Tools: {tools}"},
        },
        "judge": {"rubric": str(rubric)},
        "algorithm": {"name": "ppo", "mini_batch_size": 6, "micro_batch_tokens": 8192},
        "optim": {"lr": 1e-3, "critic_lr": 1e-3},
        "steps": steps,
        "sft_steps": 0,
        "checkpoint_every": 0,
        "output_dir": str(out_dir),
    }
    Trainer(TrainConfig.model_validate(json.loads(json.dumps(cfg))), progress=False).run()


@pytest.fixture(scope="session")
def real_run(tmp_path_factory):
    """A finished 2-step run directory (shared by the tests: copy it before changing anything)."""
    out = tmp_path_factory.mktemp("report_run") / "run"
    make_run(out)
    return out


@pytest.fixture
def run_copy(real_run, tmp_path):
    """A private copy of the real run, free to edit."""
    dst = tmp_path / "run"
    shutil.copytree(real_run, dst)
    return dst
