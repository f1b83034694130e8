"""Envs that live in Ray actors, behind a proxy with the ``ResearchEnv`` interface the trainer uses.

The trainer steps its envs in lock-step (the episode loop, ``agentrl.rollout.episode``): it calls
``reset(seed=, options={"task": ...})`` and ``step(message)``, reads ``messages`` and ``suite``,
and asks for ``trajectory(id=...)``. ``RayEnv`` answers all of that while the env itself (its tool
backends, caches and scoring) runs in an ``EnvHost`` actor, one CPU each; a host holds many envs,
one per slot, so a batch of 32 episodes needs only as many CPUs as there are hosts. The proxy
keeps a copy of the conversation so that reading ``messages`` costs no round trip.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from agentrl.env import ResearchEnv
from agentrl.env.config import load_env_config
from agentrl.env.suite import Suite, load_suite
from agentrl.env.tools import TOOL_SCHEMAS
from agentrl.rollout.ray_cluster import ensure_ray, import_ray, start_actors
from agentrl.trajectory import Message, Trajectory

__all__ = ["EnvHost", "RayEnv", "RayEnvPool", "make_env_factory"]


class EnvHost:
    """The actor side: ``ResearchEnv``s by slot number, created on first use, in one worker process."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.envs: dict[int, ResearchEnv] = {}
        self._lock = threading.Lock()  # a threaded actor: two slots may be created at once

    def ready(self) -> bool:
        """True once the actor runs (``start_actors`` waits for it)."""
        return True

    def _env(self, slot: int) -> ResearchEnv:
        with self._lock:
            if slot not in self.envs:
                self.envs[slot] = ResearchEnv(self.config)
            return self.envs[slot]

    def reset(
        self, slot: int, seed: int | None, options: dict[str, Any] | None
    ) -> tuple[str, dict[str, Any], list[Message]]:
        """``env.reset`` of one slot; also returns the new conversation."""
        env = self._env(slot)
        obs, info = env.reset(seed=seed, options=options)
        return obs, info, list(env.messages)

    def step(self, slot: int, action: Any) -> tuple[str, float, bool, bool, dict[str, Any], list[Message]]:
        """``env.step`` of one slot; also returns the messages the step appended (the assistant turn
        as the env stored it, then the tool outputs)."""
        env = self._env(slot)
        before = len(env.messages)
        obs, reward, terminated, truncated, info = env.step(action)
        return obs, reward, terminated, truncated, info, env.messages[before:]

    def trajectory(self, slot: int, id: str | None, stop_reason: str | None = None) -> Trajectory:
        """``env.trajectory`` of one slot."""
        return self._env(slot).trajectory(id=id, stop_reason=stop_reason)


class RayEnv:
    """A ``ResearchEnv`` look-alike whose env runs in an ``EnvHost`` actor (slot ``slot`` there).

    Supports what the trainer's rollout uses: ``reset``, ``step``, ``messages``, ``trajectory``,
    ``suite``, ``task`` and ``tools``. Calls block until the actor answers; they are safe to make
    from several threads for different proxies.
    """

    def __init__(self, host: Any, slot: int, suite: Suite) -> None:
        self._ray = import_ray()
        self._host, self._slot = host, slot
        self.suite = suite
        self.tools = TOOL_SCHEMAS
        self.task: Any = None
        self.messages: list[Message] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Start an episode in the actor; returns ``(observation, info)`` as ``ResearchEnv.reset``."""
        obs, info, messages = self._ray.get(self._host.reset.remote(self._slot, seed, options))
        self.messages = messages
        self.task = self.suite.task(info["task_id"])
        return obs, info

    def step(self, action: str | Message | dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One assistant turn in the actor; returns the five-tuple of ``ResearchEnv.step``."""
        obs, reward, terminated, truncated, info, added = self._ray.get(
            self._host.step.remote(self._slot, action)
        )
        self.messages.extend(added)
        return obs, reward, terminated, truncated, info

    def trajectory(self, id: str | None = None, *, stop_reason: str | None = None) -> Trajectory:
        """The episode so far, built by the env in the actor (``stop_reason`` as in ``ResearchEnv``)."""
        return self._ray.get(self._host.trajectory.remote(self._slot, id, stop_reason))


class RayEnvPool:
    """Makes ``RayEnv`` proxies spread round-robin over ``workers`` ``EnvHost`` actors (one CPU each).

    ``threads`` is how many of a host's envs may step at once (tools waiting on the network
    overlap). Starts a local Ray, or joins ``address``, when Ray is not running yet. ``close()``
    ends the actors (they also end when the pool is garbage-collected).
    """

    def __init__(
        self, config: dict[str, Any], workers: int, *, address: str | None = None, threads: int = 8
    ) -> None:
        ray = import_ray()
        self.config = config
        self.suite = load_suite(load_env_config(config).suite)
        ensure_ray(address, num_cpus=None)
        self.hosts = start_actors(
            ray, EnvHost, (config,), workers, "Ray env workers", options={"max_concurrency": max(1, threads)}
        )
        self._made = 0
        self._lock = threading.Lock()

    def __call__(self) -> RayEnv:
        """A new proxy; the n-th lives on host ``n % workers`` in slot ``n // workers``."""
        with self._lock:
            n, self._made = self._made, self._made + 1
        return RayEnv(self.hosts[n % len(self.hosts)], n // len(self.hosts), self.suite)

    def close(self) -> None:
        """End the host actors (their envs with them)."""
        ray = import_ray()
        for host in self.hosts:
            ray.kill(host)
        self.hosts = []


def make_env_factory(
    config: dict[str, Any],
    backend: str = "local",
    *,
    workers: int = 2,
    address: str | None = None,
    threads: int = 8,
) -> Callable[[], ResearchEnv | RayEnv]:
    """A zero-argument env maker: ``ResearchEnv(config)`` for ``local``, a ``RayEnvPool`` for ``ray``."""
    if backend == "local":
        return lambda: ResearchEnv(config)
    if backend == "ray":
        return RayEnvPool(config, workers, address=address, threads=threads)
    raise ValueError(f"unknown rollout backend {backend!r}; expected local or ray")
