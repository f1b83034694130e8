"""A token-in-token-out engine that plays our scripted oracle, and the expected mapping of an episode.

The engine sees only prompt ids: it decodes them, finds the task by its prompt text and the turn by
the number of assistant headers, and answers with the oracle's turn as token ids (stop token last)
and distinct fake log-probabilities. Every prompt it was fed is kept, so tests can check that the
rollout context was a prefix of the training row (token-in-token-out).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentrl.env import ResearchEnv
from agentrl.env.suite import Task
from agentrl.integrations.episode import Generation
from agentrl.policy import OraclePolicy
from agentrl.policy.base import EpisodeContext
from agentrl.tokens import Expander, token_trajectory
from agentrl.trajectory import Message, Trajectory, training_reward
from tests.tokens.fixtures import make_tokenizer_cached

ENV_CONFIG = {"search_k": 2, "page_chars": 300}


@functools.cache
def tokenizer():  # type: ignore[no-untyped-def]
    return make_tokenizer_cached("chatml")


@functools.cache
def tasks(n: int = 3) -> tuple[Task, ...]:
    return tuple(ResearchEnv(ENV_CONFIG).suite.tasks[:n])


@dataclass
class OracleEngine:
    """``await engine.generate(prompt_ids, max_tokens)`` → ``Generation``; ``noise`` as in ``OraclePolicy``."""

    tasks: Sequence[Task]
    noise: float = 0.0
    seed: int = 0
    prompts: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tok = tokenizer()
        self.stop = int(self.tok.convert_tokens_to_ids("<|im_end|>"))
        self.policy = OraclePolicy(noise=self.noise)

    async def generate(self, prompt_ids: list[int], max_tokens: int) -> Generation:
        self.prompts.append(list(prompt_ids))
        text = self.tok.decode(prompt_ids, skip_special_tokens=False)
        task = next(t for t in self.tasks if t.prompt in text)
        turn = text.count("<|im_start|>assistant") - 1
        ctx = EpisodeContext(task_id=task.id, date=task.date, seed=self.seed, ground_truth=task.ground_truth)
        msg = await self.policy.act([Message(role="assistant", content="")] * turn, ctx)
        ids = [*self.tok.encode(msg.text, add_special_tokens=False), self.stop]
        logprobs = [-0.01 * (i + 1) - 0.1 * turn for i in range(len(ids))]
        if len(ids) > max_tokens:
            return Generation(ids[:max_tokens], logprobs[:max_tokens])
        return Generation(ids, logprobs)


def expected(trajectory: Trajectory, normalize: bool = True):  # type: ignore[no-untyped-def]
    """What an adapter must hand over for ``trajectory``: a fresh expander's row with the reward
    contract's number (``normalize``: the adapters' default, as the native trainer's), split at the
    first generated token and cut after the last policy token."""
    reward = training_reward(trajectory, normalize)
    row = Expander(tokenizer()).expand(trajectory, reward=reward)
    rec = token_trajectory(row, trajectory, reward=reward)
    last = max(i for i, m in enumerate(rec.loss_mask) if m) + 1
    return row, rec, last


# ---- one judge failure in a GRPO group: the same trajectories for the native trainer and each adapter


@functools.cache
def _oracle_trajectory(task_index: int) -> Trajectory:
    import asyncio

    from agentrl.integrations.episode import run_episode

    task = tasks()[task_index]
    ep = asyncio.run(
        run_episode(
            ResearchEnv(ENV_CONFIG),
            Expander(tokenizer()),
            OracleEngine(tasks()).generate,
            task=task,
            seed=task_index,
            episode_id=f"{task.id}#oracle",
            max_new_tokens=256,
            max_completion_tokens=4096,
        )
    )
    return ep.trajectory


# Two GRPO groups (one per task); None is a trajectory the judge failed on. Rewards vary within a group.
GROUPS: dict[int, list[float | None]] = {0: [2.5, 1.0, None, 0.5], 1: [1.5, 0.0, 2.0]}


def graded_episodes(groups: dict[int, list[float | None]] = GROUPS):  # type: ignore[no-untyped-def]
    """Episodes built from the oracle's trajectory of each task, one per listed total (``None``:
    ``judge_error``), each with its own id ``<task>#<k>``, expanded and cut as ``run_episode`` does."""
    from agentrl.integrations.episode import Episode, cut_after_last_policy_token
    from agentrl.trajectory import RewardBreakdown

    exp = Expander(tokenizer())
    out = []
    for i, totals in groups.items():
        base = _oracle_trajectory(i)
        for k, total in enumerate(totals):
            reward = (
                RewardBreakdown(total=None, status="judge_error", error="judge timed out")
                if total is None
                else RewardBreakdown(total=total)
            )
            traj = base.model_copy(update={"id": f"{base.task_id}#{k}", "reward": reward}, deep=True)
            row = exp.expand(traj)
            out.append(Episode(traj, row, cut_after_last_policy_token(token_trajectory(row, traj))))
    return out


def native_grpo(episodes) -> dict[str, tuple[float, float]]:  # type: ignore[no-untyped-def]
    """The native trainer's path on the same trajectories (``build_batch`` then GRPO
    ``compute_advantages``, grouped by task): trajectory id → (score, advantage) of every trajectory
    it trains on."""
    import torch

    from agentrl.learn.batch import build_batch
    from agentrl.train.config import AlgorithmConfig
    from agentrl.train.update import compute_advantages

    tok = tokenizer()
    keep, batch, _ = build_batch(
        [e.trajectory for e in episodes],
        Expander(tok),
        normalize=False,
        pad_id=int(tok.pad_token_id),
        device=torch.device("cpu"),
    )
    compute_advantages(batch, AlgorithmConfig(name="grpo"), [t.task_id for t in keep])
    out = {}
    for i, t in enumerate(keep):
        on = batch["loss_mask"][i].bool()
        out[t.id] = (float(batch["token_level_scores"][i].sum()), float(batch["advantages"][i][on][0]))
    return out
