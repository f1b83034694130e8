"""One reward contract on every engine: the same trajectories through the native trainer's batch
(``build_batch``) and through each adapter's reward path (the episode record all adapters build,
verl's ``AgentLoopOutput`` fields, SkyRL's generator output and text env, TRL's rollout fields and
reward function) give the same reward, the same row and the same mask, with ``normalize`` on (the
default of both) and off. A judge error is trained on by none of them."""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentrl.integrations import verl_output_fields
from agentrl.integrations.episode import to_episode
from agentrl.integrations.mapping import skyrl_generator_output, trl_rollout_fields
from agentrl.integrations.settings import AgentSettings, expander_for
from agentrl.integrations.trl import make_reward_func, make_rollout_func
from agentrl.learn.batch import build_batch
from agentrl.rollout.episode import EpisodeResult
from agentrl.tokens import Expander
from agentrl.trajectory import CriterionScore, RewardBreakdown, Trajectory, training_reward
from tests.integrations.helpers import ENV_CONFIG, OracleEngine, _oracle_trajectory, tasks, tokenizer

CPU = torch.device("cpu")
# Positive weights sum to 2.5, so the normalised score is total / 2.5: never the total itself.
CRITERIA = [CriterionScore(id="a", score=1, weight=1.0), CriterionScore(id="b", score=0, weight=1.5)]
TOTALS: dict[int, list[float | None]] = {0: [2.5, 1.0, None, 0.5], 1: [1.5, 0.0, 2.0]}
# By hand: the number each trajectory trains on (None: a judge error, trained on by nobody).
WANT = {
    True: {"#0": 1.0, "#1": 0.4, "#3": 0.2, "b#0": 0.6, "b#1": 0.0, "b#2": 0.8},
    False: {"#0": 2.5, "#1": 1.0, "#3": 0.5, "b#0": 1.5, "b#1": 0.0, "b#2": 2.0},
}


def _graded() -> list[Trajectory]:
    out = []
    for i, totals in TOTALS.items():
        base = _oracle_trajectory(i)
        for k, total in enumerate(totals):
            reward = (
                RewardBreakdown(total=None, status="judge_error", error="judge timed out")
                if total is None
                else RewardBreakdown(total=total, criteria=CRITERIA)
            )
            out.append(base.model_copy(update={"id": f"{'ab'[i]}#{k}", "reward": reward}, deep=True))
    return out


def _key(tid: str) -> str:
    return tid[1:] if tid.startswith("a") else tid


def _native(trajs: list[Trajectory], normalize: bool) -> dict[str, tuple[float, list[int], list[int]]]:
    """The native trainer's batch: id → (reward on the row, input ids, loss mask) of each kept row."""
    tok = tokenizer()
    keep, batch, stats = build_batch(
        trajs, Expander(tok), normalize=normalize, pad_id=int(tok.pad_token_id), device=CPU
    )
    assert stats["train/dropped_judge_error"] == sum(t.reward.status != "ok" for t in trajs)
    out = {}
    for i, t in enumerate(keep):
        n = int(batch["attention_mask"][i].sum())
        out[t.id] = (
            float(batch["token_level_scores"][i].sum()),
            batch["input_ids"][i, :n].tolist(),
            batch["loss_mask"][i, :n].tolist(),
        )
    return out


def _same_row(native: tuple[float, list[int], list[int]], prompt, completion, mask) -> None:
    """The adapter's prompt + completion is the native row up to its last policy token, with the
    same mask; the native row has no policy token after it."""
    _, ids, loss = native
    P, C = len(prompt), len(completion)
    assert ids[: P + C] == [*prompt, *completion]
    assert loss[P : P + C] == list(mask) and not any(loss[:P]) and not any(loss[P + C :])


@pytest.mark.parametrize("normalize", [True, False])
def test_native_batch_and_every_adapter_train_on_the_same_reward_row_and_mask(normalize: bool) -> None:
    trajs = _graded()
    native = _native(trajs, normalize)
    want = WANT[normalize]
    assert {_key(k): pytest.approx(v[0]) for k, v in native.items()} == want
    assert {_key(t.id): training_reward(t, normalize) for t in trajs} == {**want, "#2": None}

    # The episode every adapter builds (verl and SkyRL through run_episode, TRL through its rollout).
    exp = expander_for(tokenizer())
    eps = [
        asyncio.run(
            to_episode(
                EpisodeResult(t.model_copy(deep=True), prompt_ids=t.info["prompt_token_ids"]),
                exp,
                None,
                normalize=normalize,
            )
        )
        for t in trajs
    ]
    trl = trl_rollout_fields(eps)
    reward_func = make_reward_func({"env": ENV_CONFIG, "normalize": normalize})
    trl_rewards = asyncio.run(reward_func([None] * len(eps), [None] * len(eps), trl["agentrl_trajectory"]))
    sky = skyrl_generator_output(eps)
    for k, (t, ep) in enumerate(zip(trajs, eps, strict=True)):
        verl = verl_output_fields(ep)
        if t.id not in native:  # the judge error: no reward, no mask, in no adapter
            assert (
                ep.reward is None
                and verl["extra_fields"]["agentrl_excluded"]
                and not any(verl["response_mask"])
            )
            assert trl["agentrl_reward"][k] is None and trl_rewards[k] is None
            assert not any(sky["loss_masks"][k]) and not any(sky["rewards"][k])
            continue
        reward = native[t.id][0]
        assert ep.reward == pytest.approx(reward) and ep.record.reward == ep.reward
        # verl: the scalar, the per-token scores (their sum), the row and the mask.
        assert verl["reward_score"] == pytest.approx(reward)
        assert sum(verl["extra_fields"]["agentrl_token_level_scores"]) == pytest.approx(reward)
        _same_row(native[t.id], verl["prompt_ids"], verl["response_ids"], verl["response_mask"])
        # TRL: the rollout's reward, the reward function's, the row and the env mask.
        assert trl["agentrl_reward"][k] == pytest.approx(reward) and trl_rewards[k] == pytest.approx(reward)
        _same_row(native[t.id], trl["prompt_ids"][k], trl["completion_ids"][k], trl["env_mask"][k])
        # SkyRL: per-token rewards and masks; the group with the judge error is dropped whole.
        if t.task_id == trajs[2].task_id:
            assert not any(sky["loss_masks"][k]) and not any(sky["rewards"][k])
        else:
            assert sum(sky["rewards"][k]) == pytest.approx(reward)
            _same_row(native[t.id], sky["prompt_token_ids"][k], sky["response_ids"][k], sky["loss_masks"][k])
    assert sky["rollout_metrics"]["agentrl/dropped_groups"] == 1.0


class _SkyClient:
    """SkyRL's inference-client contract answered by the scripted oracle."""

    def __init__(self) -> None:
        self.engine = OracleEngine(tasks())

    async def generate(self, request):  # type: ignore[no-untyped-def]
        gen = await self.engine.generate(
            request["prompt_token_ids"][0], request["sampling_params"]["max_tokens"]
        )
        return {
            "response_ids": [gen.token_ids],
            "response_logprobs": [gen.logprobs],
            "stop_reasons": ["stop"],
        }


@pytest.mark.parametrize("normalize", [True, False])
def test_each_adapter_takes_normalize_from_its_settings(normalize: bool) -> None:
    """The adapters' own entry points pass ``normalize`` from their settings: the env's rubric score
    (a weighted sum, so normalising changes it) reaches each engine as the native batch's number."""
    pytest.importorskip("skyrl_gym")
    from agentrl.integrations.skyrl import ResearchGenerator, ResearchTextEnv

    settings = {"env": ENV_CONFIG, "max_new_tokens": 256, "normalize": normalize}
    assert AgentSettings().normalize is True  # the native trainer's default (judge.normalize)
    task = tasks()[0]
    # TRL's rollout function.
    prompt = [{"role": "user", "content": task.prompt}]
    engine = OracleEngine(tasks())

    async def batched(prompts, max_tokens):  # type: ignore[no-untyped-def]
        return [await engine.generate(p, m) for p, m in zip(prompts, max_tokens, strict=True)]

    trl = make_rollout_func(settings, generate_batch=batched, tokenizer=tokenizer())([prompt], None)
    traj = Trajectory.model_validate_json(trl["agentrl_trajectory"][0])
    assert traj.reward.total > 0 and training_reward(traj, True) != traj.reward.total
    native = _native([traj], normalize)[traj.id]
    assert trl["agentrl_reward"][0] == pytest.approx(native[0])
    # SkyRL's generator.
    gen = ResearchGenerator(_SkyClient(), tokenizer(), settings, max_completion_tokens=4096)
    out = asyncio.run(
        gen.generate(
            {"prompts": [prompt], "env_extras": [{"task_id": task.id, "seed": 0}], "trajectory_ids": None}
        )
    )
    sky_traj = gen.episodes[0].trajectory
    assert sum(out["rewards"][0]) == pytest.approx(_native([sky_traj], normalize)[sky_traj.id][0])
    # SkyRL's text env: the terminating step's reward.
    env = ResearchTextEnv(settings, extras={"task_id": task.id, "seed": 0})
    env.init([])
    from agentrl.policy import OraclePolicy
    from agentrl.policy.base import EpisodeContext

    ctx = EpisodeContext(task_id=task.id, date=task.date, seed=0, ground_truth=task.ground_truth)
    step = {"done": False}
    while not step["done"]:
        step = env.step(asyncio.run(OraclePolicy().act(list(env.env.messages), ctx)).text)
    text_traj = env.env.trajectory()
    assert step["reward"] == pytest.approx(training_reward(text_traj, normalize))
    assert step["reward"] == pytest.approx(_native([text_traj], normalize)[text_traj.id][0])
