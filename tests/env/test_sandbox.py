"""The generated sandbox web and the Alphabet suite: determinism, size, the clock and the oracle."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json

import pytest

from agentrl.env import ResearchEnv
from agentrl.env.backends.sandbox import sandbox_backend
from agentrl.env.sandbox import build
from agentrl.env.suite import load_suite
from agentrl.policy import EpisodeContext, OraclePolicy

from .conftest import ALPHABET, call


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_build_is_deterministic(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    build(a, seed=3, companies=4)
    build(b, seed=3, companies=4)
    build(c, seed=4, companies=4)
    for name in ("corpus.jsonl", "tasks.jsonl"):
        assert _digest(a / name) == _digest(b / name)
        assert _digest(a / name) != _digest(c / name)


def test_default_sandbox_size_and_kinds():
    suite = load_suite("sandbox")
    assert len(suite.tasks) >= 500
    kinds = {}
    with open(suite.corpus_path, encoding="utf-8") as f:
        for line in f:
            k = json.loads(line)["kind"]
            kinds[k] = kinds.get(k, 0) + 1
    assert sum(kinds.values()) >= 5000
    assert {"official", "filing", "news", "preview", "gossip", "annual"} <= set(kinds)
    families = {t.family for t in suite.tasks}
    assert {"quarterly", "annual", "trap_year", "trap_quarter"} <= families
    years = {t.date[:4] for t in suite.tasks}
    assert len(years) >= 4


def _episode(env, policy, task, seed=0):
    env.reset(seed=seed, options={"task": task})
    ctx = EpisodeContext(task_id=task.id, date=task.date, seed=seed, ground_truth=task.ground_truth)
    done, r = False, 0.0
    while not done:
        msg = asyncio.run(policy.act(env.messages, ctx))
        _, r, term, trunc, _ = env.step(msg)
        done = term or trunc
    return r


def test_oracle_at_noise_zero_scores_the_maximum_on_every_default_task():
    env = ResearchEnv()
    policy = OraclePolicy(noise=0.0)
    bad = [(t.id, r) for t in env.suite.tasks if (r := _episode(env, policy, t)) != pytest.approx(2.5)]
    assert not bad, bad[:5]


def test_noisy_oracle_scores_lower(small_suite):
    env = ResearchEnv({"suite": str(small_suite)})
    rewards = [_episode(env, OraclePolicy(noise=1.0), t) for t in env.suite.tasks]
    assert max(rewards) <= 2.5 and sum(rewards) / len(rewards) < 1.0
    assert min(rewards) < 0  # a stated rumour costs the negative criterion


def test_clock_hides_future_documents_in_every_task(small_suite):
    """The trap: no search ever returns a page dated after the task date, and such pages cannot be opened."""
    suite = load_suite(str(small_suite))
    sb = sandbox_backend(suite.corpus_path)
    for task in suite.tasks:
        day = task.day
        for q in (task.prompt, task.ground_truth["query"], "revenue results full-year", "gossip preview"):
            for hit in sb.search(q, 20, before=day):
                assert dt.date.fromisoformat(hit.date) <= day, (task.id, hit.url)
    future = [(u, d) for u, d in zip(sb.raw_urls, sb.dates, strict=True) if d > "2025-06-01"]
    assert future
    env = ResearchEnv({"suite": str(small_suite)})
    task = next(t for t in suite.tasks if t.date < "2025-06-01")
    env.reset(options={"task": task.id})
    obs, *_ = env.step(call("open_url", url=future[0][0]))
    assert obs.startswith("Error: 404")


def test_alphabet_trap_matches_reference():
    env = ResearchEnv({"suite": str(ALPHABET)})
    env.reset(options={"task": "alphabet-2025-cloud"})
    obs, *_ = env.step(
        call("search", query="Summarise Google's 2025 financial results, focusing on Google Cloud revenue")
    )
    urls = [line.strip() for line in obs.splitlines() if line.strip().startswith("https://")]
    assert urls[:3] == [
        "https://abc.xyz/investor/news/2025-04-24-q1-2025-results",
        "https://buzzstock-gossip.example/t/google-2025-revenue-5-trillion",
        "https://streetview-analysts.example/previews/alphabet-q1-2025",
    ]
    assert not any("2025-07-23" in u or "2026" in u for u in urls)  # Q2 and the full year do not exist yet
    good = OraclePolicy(noise=0.0)
    gossip = OraclePolicy(noise=1.0)
    task = env.suite.task("alphabet-2025-cloud")
    assert _episode(env, good, task) == pytest.approx(2.5)
    assert _episode(env, gossip, task) == pytest.approx(0.5)
    assert _episode(env, good, env.suite.task("alphabet-q4-2024-cloud")) == pytest.approx(2.5)


def test_llm_criteria_defer_the_reward(tmp_path):
    build(tmp_path, seed=1, companies=1, llm_criteria=True)
    env = ResearchEnv({"suite": str(tmp_path)})
    task = env.suite.tasks[0]
    assert task.rubric["criteria"][-1]["id"] == "sourcing"
    assert _episode(env, OraclePolicy(), task) == 0.0
    traj = env.trajectory()
    assert traj.info["needs_judge"] and traj.reward is None


def test_default_sandbox_ground_truth_is_consistent():
    """Every task's official source is public at its date and prints the figure; distractors print theirs;
    for the traps the official release is the latest one out and the asked period's is not."""
    from agentrl.env.backends.sandbox import normalize_url

    suite = load_suite("sandbox")
    sb = sandbox_backend(suite.corpus_path)
    by_url = {u: i for i, u in enumerate(sb.urls)}
    releases: dict[str, list[str]] = {}
    for url, date in zip(sb.urls, sb.dates, strict=True):
        if "/news/" in url and url.startswith("https://ir."):
            releases.setdefault(url.split("/news/")[0], []).append(date)
    for task in suite.tasks:
        gt = task.ground_truth
        off = gt["official"]
        i = by_url[normalize_url(off["url"])]
        assert sb.dates[i] == off["date"] <= task.date, task.id
        assert off["figure"] in sb.texts[i], task.id
        for d in gt["distractors"]:
            j = by_url[normalize_url(d["url"])]
            assert d["figure"] in sb.texts[j] and d["figure"] != off["figure"], task.id
        if task.family in ("trap_year", "trap_quarter"):
            site = normalize_url(off["url"]).split("/news/")[0]
            later = [d for d in releases[site] if off["date"] < d <= task.date]
            assert not later, (task.id, later)  # no newer release is out at the task date
