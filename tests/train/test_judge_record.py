"""The judge owns the reward in training: the rubric a training step judged with is recorded on
each trajectory, so `agentrl judge` re-judging the stored step gives the training totals; the
normalised reward the trainer places is the judge's own; old `judge:` config keys still load."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

import agentrl.cli
from agentrl.errors import ConfigError
from agentrl.judge import load_rubric, normalized_reward, parse_rubric, score_deterministic
from agentrl.learn.batch import build_batch
from agentrl.tokens import Expander
from agentrl.train.config import TrainJudgeConfig, load_train_config
from agentrl.train.step_sampling import StepJudge
from agentrl.trajectory import Message, Trajectory, read_trajectories, write_trajectories
from tests.judge.fake_server import FakeJudgeServer
from tests.tokens.fixtures import make_tokenizer_cached

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parents[2]
TASK_RUBRIC = ROOT / "rubrics" / "alphabet-2025-q1-cloud-offline.yaml"
# The override: LLM criteria graded by the fake judge's backtick rule, and a regex one.
OVERRIDE = {
    "id": "override",
    "criteria": [
        {"id": "figure", "text": "Gives the figure `12.3 billion`.", "weight": 2.0},
        {"id": "quarter", "text": "Labels it `Q1 2025`.", "weight": 1.0},
        {"id": "cite", "text": "Cites.", "weight": 1.0, "grader": {"type": "regex", "pattern": r"\\cite\{"}},
        {"id": "rumour", "kind": "negative", "text": "Repeats the `5 trillion` rumour.", "weight": -1.0},
    ],
}
REPORTS = [
    "Q1 2025 Google Cloud revenue was $12.3 billion \\cite{release}.",
    "Google Cloud revenue was $12.3 billion in 2025.",
    "Alphabet made $5 trillion in Q1 2025 \\cite{gossip}.",
]


def _env_like(i: int, report: str) -> Trajectory:
    """A trajectory as the env leaves it: the task's rubric recorded and already scored by it."""
    tok = make_tokenizer_cached("chatml")
    ids = [*tok.encode(report, add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]
    traj = Trajectory(
        id=f"t{i}",
        task_id="alphabet-2025-cloud",
        messages=[
            Message(role="user", content="Summarise Alphabet's Q1 2025."),
            Message(role="assistant", content=report, token_ids=ids),
        ],
        info={"rubric": yaml.safe_load(TASK_RUBRIC.read_text()), "needs_judge": False},
    )
    traj.reward = score_deterministic(load_rubric(TASK_RUBRIC), report)
    return traj


def test_an_override_is_recorded_and_agentrl_judge_rejudges_to_the_training_totals(tmp_path, monkeypatch):
    override = tmp_path / "override.yaml"
    override.write_text(yaml.safe_dump(OVERRIDE))
    rubric = load_rubric(override)
    trajs = [_env_like(i, r) for i, r in enumerate(REPORTS)]
    task_totals = [t.reward.total for t in trajs]
    with FakeJudgeServer() as server:
        cfg = TrainJudgeConfig(
            rubric=str(override),
            model="good:train",
            api_base=server.url,
            cache_path=str(tmp_path / "c.sqlite"),
        )
        again = [t.model_copy(deep=True) for t in trajs]
        judge = StepJudge(cfg)
        metrics = judge.score(trajs)
        judge.close()
        assert metrics["judge/calls"] == 3.0
        # The run's judge has the verdict cache of its JudgeConfig: a second pass asks nothing.
        judge = StepJudge(cfg)
        assert judge.score(again) == {"judge/calls": 0.0, "judge/cache_hits": 9.0}
        judge.close()
        trained = [t.reward.total for t in trajs]
        assert trained == [4.0, 2.0, 1.0]  # figure 2 + quarter 1 + cite 1; no Q1 label, no cite; rumour -1
        assert trained != task_totals  # the override matters, so a wrong rubric shows
        for t in trajs:
            assert (t.reward.rubric_id, t.reward.rubric_hash) == ("override", rubric.content_hash)
            assert parse_rubric(t.info["rubric"]).content_hash == rubric.content_hash
        step = tmp_path / "step_00001.jsonl"
        write_trajectories(step, trajs)
        # Re-judge the stored step with `agentrl judge`, no --rubric, no cache: real calls again.
        monkeypatch.setattr(agentrl.cli, "COMMANDS", ("judge",))
        out = tmp_path / "rejudged.jsonl"
        argv = ["judge", str(step), "--model", "good:cli", "--api-base", server.url, "--no-cache"]
        assert agentrl.cli.main([*argv, "--out", str(out)]) == 0
        assert server.counts["good:cli"] == 3
    rejudged = list(read_trajectories(out))
    assert [t.reward.total for t in rejudged] == trained
    assert [t.reward.normalized for t in rejudged] == [t.reward.normalized for t in trajs]
    assert {t.reward.rubric_hash for t in rejudged} == {rubric.content_hash}


@pytest.mark.parametrize("aggregation", ["weighted_sum", "normalized"])
def test_the_trainer_places_the_judges_normalised_reward(tmp_path, aggregation):
    """One input, both paths: the judge's recorded normalised value, ``normalized_reward`` on a
    reward recorded without it (an older file) and the token score ``build_batch`` places agree."""
    override = tmp_path / "r.yaml"
    override.write_text(
        yaml.safe_dump(
            {
                "id": "det",
                "aggregation": aggregation,
                "criteria": [
                    {"id": "fig", "text": "figure", "weight": 2.0, "grader": {"type": "contains", "text": "12.3"}},
                    {"id": "q", "text": "quarter", "weight": 2.0, "grader": {"type": "contains", "text": "Q1"}},
                    {"id": "bad", "kind": "negative", "text": "rumour", "weight": -3.0,
                     "grader": {"type": "contains", "text": "trillion"}},
                ],
            }
        )
    )  # fmt: skip
    trajs = [_env_like(i, r) for i, r in enumerate(REPORTS)]
    StepJudge(TrainJudgeConfig(rubric=str(override))).score(trajs)
    # weighted_sum totals 4, 2, -1 → 1.0, 0.5, 0.0 (clipped); normalized: the same, as totals.
    expected = [1.0, 0.5, 0.0]
    assert [t.reward.normalized for t in trajs] == expected
    legacy = [
        t.model_copy(update={"reward": t.reward.model_copy(update={"normalized": None})}) for t in trajs
    ]
    assert [normalized_reward(t) for t in legacy] == expected
    exp = Expander(make_tokenizer_cached("chatml"))
    for batch_of in (trajs, legacy):
        keep, batch, _ = build_batch(batch_of, exp, normalize=True, pad_id=0, device=torch.device("cpu"))
        last = (batch["loss_mask"] * torch.arange(batch["loss_mask"].shape[1])).argmax(-1)
        placed = batch["token_level_scores"][torch.arange(len(keep)), last].tolist()
        assert placed == pytest.approx(expected)
    _, raw, _ = build_batch(trajs, exp, normalize=False, pad_id=0, device=torch.device("cpu"))
    assert raw["token_level_scores"].sum().item() == pytest.approx(sum(t.reward.total for t in trajs))


def test_old_judge_keys_still_load_and_every_judge_setting_is_available(tmp_path):
    path = tmp_path / "c.yaml"
    old = {
        "rubric": str(TASK_RUBRIC),
        "model": "m",
        "api_base": "http://x/v1",
        "concurrency": 4,
        "normalize": False,
    }
    path.write_text(yaml.safe_dump({"judge": old}))
    cfg = load_train_config(path)
    assert {k: getattr(cfg.judge, k) for k in old} == old
    new = {**old, "samples": 3, "cache_path": str(tmp_path / "v.sqlite"), "temperature": 0.2}
    path.write_text(yaml.safe_dump({"judge": new}))
    assert load_train_config(path).judge.samples == 3
    path.write_text(yaml.safe_dump({"judge": {"modle": "m"}}))
    with pytest.raises(ConfigError, match=r"c\.yaml:2:3: judge\.modle"):
        load_train_config(path)
    assert json.loads(cfg.model_dump_json())["judge"]["normalize"] is False
