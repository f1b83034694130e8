"""The verdict cache key holds every judge setting that can change a verdict (through the real
litellm path against fake servers on 127.0.0.1)."""

from __future__ import annotations

import asyncio

from agentrl.judge import JudgeConfig, make_judge
from agentrl.judge.cache import OTHER_FIELDS, VERDICT_FIELDS, cache_key
from tests.judge.conftest import GOOD_REPORT, make_trajectory
from tests.judge.fake_server import FakeJudgeServer
from tests.judge.test_llm import RUBRIC


def test_every_judge_setting_is_classified():
    """A new JudgeConfig field must be put in the key, or said not to change a verdict."""
    assert set(VERDICT_FIELDS) | set(OTHER_FIELDS) == set(JudgeConfig.model_fields)
    assert not set(VERDICT_FIELDS) & set(OTHER_FIELDS)


def test_each_verdict_setting_changes_the_key_and_the_others_do_not():
    base = JudgeConfig(model="m", api_base="http://127.0.0.1:1/v1")
    crit = RUBRIC.criteria[0]

    def key(cfg: JudgeConfig, **kw) -> str:
        parts = {"rubric_hash": RUBRIC.content_hash, "prompt_hash": "p", "input_hash": "i", "criterion": crit}
        return cache_key(cfg, **{**parts, **kw})

    changed = {
        "model": "m2",
        "api_base": "http://127.0.0.1:2/v1",
        "temperature": 0.7,
        "max_tokens": 512,
        "response_format": False,
        "extra_kwargs": {"top_p": 0.9},
        "samples": 3,
        "criteria_per_call": 1,
        "include_sources": False,
        "source_tools": None,
        "max_source_chars": 10,
    }
    assert set(changed) == set(VERDICT_FIELDS)
    keys = {key(base)} | {key(base.model_copy(update={k: v})) for k, v in changed.items()}
    assert len(keys) == 1 + len(changed)
    same = {"api_key": "k", "concurrency": 1, "timeout_s": 1.0, "max_retries": 0, "cache_path": "x.sqlite"}
    assert {key(base.model_copy(update={k: v})) for k, v in same.items()} == {key(base)}
    other = RUBRIC.criteria[1]
    assert len({key(base), key(base, criterion=other), key(base, input_hash="j"), key(base, prompt_hash="q"),
                key(base, rubric_hash="r")}) == 5  # fmt: skip


def _judge_twice(cfg: JudgeConfig) -> list[tuple[int, int]]:
    """(calls, cache hits) of each of two scorings of the same trajectory with one judge each."""
    out = []
    for _ in range(2):
        with make_judge(cfg) as judge:
            r = asyncio.run(judge.score(make_trajectory(GOOD_REPORT), RUBRIC))
        assert r.status == "ok"
        out.append((r.calls, r.cache_hits))
    return out


def test_temperature_and_api_base_are_separate_cache_entries(tmp_path):
    cache = str(tmp_path / "verdicts.sqlite")
    with FakeJudgeServer() as a, FakeJudgeServer() as b:
        cold = JudgeConfig(model="good", api_base=a.url, cache_path=cache, backoff_base_s=0.01)
        assert _judge_twice(cold) == [(1, 0), (0, 3)]  # same settings: one entry, then hits
        warm = cold.model_copy(update={"temperature": 0.8})
        assert _judge_twice(warm) == [(1, 0), (0, 3)]  # another temperature: asked again
        other = cold.model_copy(update={"api_base": b.url})
        assert _judge_twice(other) == [(1, 0), (0, 3)]  # another server: asked again
        assert (a.counts["good"], b.counts["good"]) == (2, 1)
        assert [r["temperature"] for r in a.requests] == [0.0, 0.8]
    with make_judge(cold) as judge:
        assert judge._cache is not None and len(judge._cache) == 9  # 3 LLM criteria × 3 settings
