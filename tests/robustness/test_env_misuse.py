"""The gymnasium env survives its caller's mistakes.

- A ``reset`` that fails (an unknown task) leaves a usable env: the next valid ``reset`` and
  ``step`` work through ``gymnasium.make``'s wrappers (they raised ``TypeError: cannot unpack
  non-iterable NoneType object`` from the passive checker), and a failed reset in the middle of an
  episode ends it (``step`` asks for a reset) rather than going on with the old episode.
- ``step(None)`` and ``step(5)`` are refused with ``InvalidAction`` naming what an action is (they
  were taken as an empty final answer) and leave the episode as it was.
"""

from __future__ import annotations

import gymnasium
import pytest

import agentrl.env  # noqa: F401  (registers the env)
from agentrl.env import ENV_ID
from agentrl.errors import ConfigError
from tests.robustness.cli_run import build_tiny_suite


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return build_tiny_suite(tmp_path_factory)


def _make(suite):
    env = gymnasium.make(ENV_ID, config={"suite": str(suite)})
    return env, env.unwrapped.suite.tasks[0].id


def test_a_failed_first_reset_leaves_a_usable_env(suite):
    env, task = _make(suite)
    with pytest.raises(ConfigError, match="no task with id 'nope'"):
        env.reset(options={"task": "nope"})
    obs, _ = env.reset(options={"task": task})
    assert isinstance(obs, str)
    _, _, terminated, truncated, _ = env.step("A first thought, no tool call yet.")
    assert terminated and not truncated


def test_a_failed_reset_mid_episode_ends_that_episode(suite):
    env, task = _make(suite)
    env.reset(options={"task": task})
    with pytest.raises(ConfigError):
        env.reset(options={"task": "nope"})
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step("the old episode must not go on")
    assert env.unwrapped.task.id == task  # the failed reset changed nothing else
    env.reset(options={"task": task})
    env.step("works again")


@pytest.mark.parametrize("action", [None, 5, 3.5, b"bytes", ["list"]], ids=repr)
def test_non_text_actions_are_refused_and_the_episode_goes_on(suite, action):
    env, task = _make(suite)
    env.reset(options={"task": task})
    with pytest.raises(
        gymnasium.error.InvalidAction, match=r"step\(action\): the action is the assistant's turn"
    ):
        env.step(action)
    assert env.unwrapped.turns == 0 and not env.unwrapped.messages[2:]
    search = '<tool_call>{"name": "search", "arguments": {"query": "revenue"}}</tool_call>'
    _, _, terminated, _, _ = env.step(search)
    assert not terminated and env.unwrapped.turns == 1


def test_the_env_checker_is_still_available_on_request(suite):
    env = gymnasium.make(ENV_ID, config={"suite": str(suite)}, disable_env_checker=False)
    env.reset(options={"task": env.unwrapped.suite.tasks[0].id})
    env.step("fine")
