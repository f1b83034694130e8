"""From finished episodes to a batch: judge errors dropped and counted, the normalised reward on the
last policy token, and the judge called only where the env could not score."""

import pytest
import torch

from agentrl.errors import ConfigError
from agentrl.judge import load_rubric
from agentrl.learn.batch import build_batch, normalized_reward
from agentrl.tokens import Expander
from agentrl.train.config import TrainJudgeConfig
from agentrl.train.step_sampling import StepJudge
from agentrl.trajectory import CriterionScore, FunctionCall, Message, RewardBreakdown, ToolCall, Trajectory
from tests.tokens.fixtures import make_tokenizer_cached

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _traj(i, reward, report="Q1 2025 Google Cloud revenue was $12.3 billion \\cite{release}.", opened=None):
    """``opened``: (url, page text) of a page the agent opened before answering."""
    tok = make_tokenizer_cached("chatml")
    ids = [*tok.encode(report, add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]
    research = []
    if opened is not None:
        call = ToolCall(
            id="c1", function=FunctionCall(name="open_url", arguments=f'{{"url": "{opened[0]}"}}')
        )
        research = [
            Message(role="assistant", content="", tool_calls=[call]),
            Message(role="tool", tool_call_id="c1", content=f"URL: {opened[0]}\n\n{opened[1]}"),
        ]
    return Trajectory(
        id=f"t{i}",
        task_id="alphabet-2025-cloud",
        messages=[
            Message(role="user", content="Summarise."),
            *research,
            Message(role="assistant", content=report, token_ids=ids),
        ],
        reward=reward,
    )


def test_build_batch_drops_judge_errors_and_places_the_normalised_reward():
    crit = [CriterionScore(id="a", score=1, weight=1.0), CriterionScore(id="b", score=0, weight=1.5)]
    trajs = [
        _traj(0, RewardBreakdown(total=1.0, criteria=crit)),
        _traj(1, RewardBreakdown(total=None, status="judge_error", error="timeout")),
        _traj(2, None),
        _traj(3, RewardBreakdown(total=2.5, criteria=crit)),
    ]
    exp = Expander(make_tokenizer_cached("chatml"))
    keep, batch, stats = build_batch(trajs, exp, normalize=True, pad_id=0, device=torch.device("cpu"))
    assert [t.id for t in keep] == ["t0", "t3"]
    assert stats["train/dropped_judge_error"] == 2.0
    last = (batch["loss_mask"] * torch.arange(batch["loss_mask"].shape[1])).argmax(-1)
    assert batch["token_level_scores"][torch.arange(2), last].tolist() == pytest.approx(
        [0.4, 1.0]
    )  # 1/2.5, clip(2.5/2.5)
    assert batch["token_level_scores"].sum().item() == pytest.approx(1.4)
    assert normalized_reward(keep[0]) == pytest.approx(0.4)
    # A rubric that already normalizes is not divided again.
    already = _traj(4, RewardBreakdown(total=0.4, criteria=crit, aggregation="normalized"))
    assert normalized_reward(already) == pytest.approx(0.4)
    assert normalized_reward(_traj(5, RewardBreakdown(total=0.0, error="no final answer"))) == 0.0
    _, raw, _ = build_batch(trajs, exp, normalize=False, pad_id=0, device=torch.device("cpu"))
    assert raw["token_level_scores"].sum().item() == pytest.approx(3.5)


def test_judge_rescoring_with_a_rubric_override_and_the_llm_requirement():
    rubric = ROOT / "rubrics" / "alphabet-2025-q1-cloud-offline.yaml"
    q1, gossip = "https://abc.xyz/investor/news/2025-04-24-q1-2025-results", "https://gossip.example/t/5"
    trajs = [
        _traj(
            0,
            None,
            f"Q1 2025 Google Cloud revenue was $12.3 billion \\cite{{{q1}}}.",
            (q1, "Cloud: $12.3 billion"),
        ),
        _traj(1, None, f"Revenue was $5 trillion \\cite{{{gossip}}}.", (gossip, "Revenue: $5 trillion!")),
    ]
    judge = StepJudge(TrainJudgeConfig(rubric=str(rubric)))
    judge.score(trajs)
    judge.close()
    assert [t.reward.total for t in trajs] == [2.5, 0.5]
    assert trajs[0].reward.rubric_hash == load_rubric(rubric).content_hash
    with pytest.raises(ConfigError, match=r"set judge\.model"):
        StepJudge(TrainJudgeConfig(rubric=str(ROOT / "rubrics" / "alphabet-2025-q1-cloud.yaml")))
    # Nothing pending and no override: no judge call at all.
    assert StepJudge(TrainJudgeConfig()).score(trajs) == {}
