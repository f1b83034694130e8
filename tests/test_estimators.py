"""The advantage estimators are one table (``agentrl.learn.algorithm``): the config's literal, the
CLI's ``--algorithm`` choices and which of them needs a critic all read it (issue 40, item 4)."""

from __future__ import annotations

from typing import get_args

from agentrl.cli import build_parser
from agentrl.learn.algorithm import CRITIC_ESTIMATORS, ESTIMATORS, AlgorithmConfig


def _choices(command: list[str]) -> tuple[str, ...]:
    parser = build_parser()
    for name in command:
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = sub.choices[name]
    return tuple(next(a for a in parser._actions if a.dest == "algorithm").choices)


def test_the_cli_offers_exactly_the_configs_estimators():
    assert get_args(AlgorithmConfig.model_fields["name"].annotation) == ESTIMATORS
    assert _choices(["explain"]) == ESTIMATORS
    assert _choices(["replay"]) == ESTIMATORS


def test_needs_critic_is_the_tables():
    for name in ESTIMATORS:
        assert AlgorithmConfig(name=name).needs_critic == (name in CRITIC_ESTIMATORS)
    assert set(ESTIMATORS) >= CRITIC_ESTIMATORS
