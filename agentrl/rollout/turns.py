"""What the episode loop and its generate functions exchange: ``Request`` in, ``Generation`` /
``Message`` / ``Stop`` out, the ``Limits`` of token mode, the ``EpisodeSpec`` of one episode and
the per-turn seed. ``agentrl.rollout.episode`` (which re-exports them) has the contract.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentrl.env.suite import Task
from agentrl.policy.base import EpisodeContext
from agentrl.rollout.context import NO_CONTEXT_POLICY, ContextPolicy
from agentrl.seeds import episode_seed, stable_seed
from agentrl.trajectory import Message

__all__ = [
    "NO_LIMITS",
    "BatchGenerateFn",
    "EpisodeSpec",
    "GenerateFn",
    "Generation",
    "Limits",
    "Request",
    "Sampled",
    "Stop",
    "turn_finish",
    "turn_seed",
]


def turn_seed(seed: int, turn: int) -> int:
    """The sampling seed of turn ``turn`` (0-based) of the episode seeded ``seed`` (63 bits)."""
    return stable_seed(seed, turn)


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to run: trajectory ``id``, the ``task`` (or its id), the env's reset ``seed``
    (None: the env's own), and what to add to ``trajectory.info`` (in this order)."""

    id: str
    task: Task | str
    seed: int | None
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def sample(self) -> int | None:
        """The sample index within the task's group, as recorded in ``info`` (None when not)."""
        return self.info.get("sample")

    @classmethod
    def drawn(
        cls, task: Task, sample: int, seed: int, *, step: int | None = None, **info: Any
    ) -> EpisodeSpec:
        """Sample ``sample`` of ``task`` in a run seeded ``seed``, the one rule every caller follows
        (``agentrl rollout`` and ``eval``, the trainer's steps and its evaluations, the warm start):
        id ``task#sample``, reset seed ``episode_seed(seed, task.id, sample, step=step)`` (a training
        step's own draw with ``step``), ``info`` the sample and that seed, then ``info``."""
        ep_seed = episode_seed(seed, task.id, sample, step=step)
        return cls(f"{task.id}#{sample}", task, ep_seed, {"sample": sample, "seed": ep_seed, **info})


@dataclass(frozen=True)
class Generation:
    """One token-mode turn: ``token_ids`` ``[T]`` as sampled (stop token included when one was
    sampled), the sampler's ``logprobs`` ``[T]`` (None when the engine gives none). How the turn
    finished is not the engine's to say: the episode loop decides it (``turn_finish``)."""

    token_ids: list[int]
    logprobs: list[float] | None


class Sampled(Protocol):
    """What a token-mode generate function may return (``Generation`` or an engine's own type)."""

    token_ids: list[int]
    logprobs: list[float] | None


def turn_finish(ids: Sequence[int], stops: Collection[int]) -> str:
    """How a sampled turn finished: ``stop`` when its last id is a stop id, else ``length`` (it was
    cut). The one place that decides it, whatever the engine reported."""
    return "stop" if ids and ids[-1] in stops else "length"


@dataclass(frozen=True)
class Stop:
    """Returned by a generate function that has no further turn: the episode ends with ``reason``
    (and ``detail``, when given, in ``info["truncated_detail"]``)."""

    reason: str
    detail: str | None = None


@dataclass(frozen=True)
class Limits:
    """Token-mode limits (see the module docstring); None: no such limit."""

    max_new_tokens: int | None = None
    max_len: int | None = None
    max_completion_tokens: int | None = None
    context: ContextPolicy = NO_CONTEXT_POLICY  # how a long episode stays within max_len


#: No limit at all (chat mode, or an engine that bounds its own turns).
NO_LIMITS = Limits()


@dataclass(frozen=True)
class Request:
    """One turn asked of a generate function: the episode's ``env`` and ``spec``, its position
    ``index`` in ``run_episodes``, the 0-based ``turn``, the turn's sampling ``seed`` (None when the
    episode has none), the conversation so far, and in token mode the ``prompt_ids`` and the most
    tokens it may sample (``max_tokens``, None: the engine's own limit)."""

    env: Any
    spec: EpisodeSpec
    index: int
    turn: int
    seed: int | None
    messages: list[Message]
    prompt_ids: list[int] | None = None
    max_tokens: int | None = None
    summary: bool = False  # the policy is asked for its notes (context management), not a tool turn

    def context(self) -> EpisodeContext:
        """What a chat policy may know besides the messages (the env's task, tools, the seed)."""
        task = self.env.task
        return EpisodeContext(
            task_id=task.id,
            date=task.date,
            seed=self.spec.seed or 0,
            tools=self.env.tools,
            ground_truth=task.ground_truth,
            send_tools=bool(getattr(self.env, "send_tools", False)),
        )


GenerateFn = Callable[[Request], Awaitable["Message | Sampled | Stop"]]
BatchGenerateFn = Callable[[list[Request]], "Sequence[Sampled] | Awaitable[Sequence[Sampled]]"]
