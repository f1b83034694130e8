"""The official-source share in ``summary.json``: the pages opened, classified by the corpus's page
kinds, checked against the oracle's own choice of source (its task's ground truth), and the
first/last windows of the summary."""

from pathlib import Path

from agentrl.env.sources import OPENED, OPENED_OFFICIAL, opened_sources, page_kinds
from agentrl.env.suite import load_suite
from agentrl.train.report import summarize_sources
from agentrl.train.sft import collect_oracle_trajectories

QUICKSTART_SUITE = str(Path(__file__).resolve().parents[2] / "examples" / "quickstart-env")


def test_opened_pages_are_classified_as_the_oracle_chose_them():
    suite = load_suite(QUICKSTART_SUITE)
    kinds = page_kinds(suite)
    assert kinds, "the sandbox corpus has official pages"
    env = {"suite": QUICKSTART_SUITE}
    trajs = collect_oracle_trajectories(env, suite.tasks, noise=0.5, seed=3, episodes=40)
    # The reference: the url the oracle opened, looked up in its task's ground truth (official
    # source or a distractor), not in the corpus.
    official = opened = 0
    for t in trajs:
        gt = suite.task(t.task_id).ground_truth
        for e in t.info["tool_log"]:
            if e["tool"] == "open_url" and e["ok"]:
                opened += 1
                official += e["args"]["url"] == gt["official"]["url"]
                assert e["args"]["url"] in {gt["official"]["url"]} | {d["url"] for d in gt["distractors"]}
    assert 0 < official < opened  # noise 0.5: both kinds are opened
    assert opened_sources(trajs, kinds) == {OPENED: float(opened), OPENED_OFFICIAL: float(official)}
    # at noise 0 the oracle opens only official releases
    clean = collect_oracle_trajectories(env, suite.tasks, noise=0.0, seed=3, episodes=10)
    counts = opened_sources(clean, kinds)
    assert counts[OPENED] == counts[OPENED_OFFICIAL] == 10.0


def test_summary_pools_the_first_and_last_windows():
    rows = [{OPENED: 4.0, OPENED_OFFICIAL: 1.0}, {OPENED: 0.0, OPENED_OFFICIAL: 0.0}]
    rows += [{OPENED: 2.0, OPENED_OFFICIAL: 1.0}] * 6
    rows += [{OPENED: 3.0, OPENED_OFFICIAL: 3.0}, {OPENED: 1.0, OPENED_OFFICIAL: 0.0}]
    # 10 steps, windows of 2: first (1 + 0) / (4 + 0), last (3 + 0) / (3 + 1)
    assert summarize_sources(rows) == {"official_source_first": 0.25, "official_source_last": 0.75}
    assert summarize_sources([{"step": 1.0}]) == {}
    assert opened_sources([], {}) == {}


def test_failed_opens_are_not_counted_and_urls_are_normalised():
    from agentrl.trajectory import Message, Trajectory

    suite = load_suite(QUICKSTART_SUITE)
    gt = suite.tasks[0].ground_truth
    url = gt["official"]["url"]
    bare = url.split("://", 1)[1]  # as a policy may write it: no scheme
    log = [
        {"tool": "open_url", "ok": True, "args": {"url": bare}},
        {"tool": "open_url", "ok": False, "args": {"url": url}, "error": "timed out"},
        {"tool": "open_url", "ok": True, "args": {"url": gt["distractors"][0]["url"]}},
        {"tool": "search", "ok": True, "args": {"query": url}},
        {"tool": ["open_url"], "ok": True, "args": {"url": url}},  # a hand-edited log: not a tool's name
        {"tool": "open_url", "ok": True, "args": ["not", "a", "dict"]},  # opened, its URL unreadable
    ]
    t = Trajectory(id="x", task_id=suite.tasks[0].id, messages=[Message(role="user", content="q")])
    t.info["tool_log"] = log
    assert opened_sources([t], page_kinds(suite)) == {OPENED: 3.0, OPENED_OFFICIAL: 1.0}


def test_rollout_summary_counts_what_the_trainer_logs():
    """The same trajectories through the trainer's step metrics and ``agentrl rollout``'s summary:
    the same mean (normalised) reward, tool calls and opened pages, official ones among them."""
    import math

    from agentrl.env import ResearchEnv
    from agentrl.rollout.runner import RolloutSummary
    from agentrl.train.step_metrics import rollout_metrics
    from agentrl.trajectory import RewardBreakdown

    suite = load_suite(QUICKSTART_SUITE)
    kinds = page_kinds(suite)
    env_cfg = {"suite": QUICKSTART_SUITE}
    trajs = collect_oracle_trajectories(env_cfg, suite.tasks, noise=0.5, seed=5, episodes=12)
    # an episode that answers at once (no tool call, a wrong report), and a judge error
    env = ResearchEnv(env_cfg)
    env.reset(options={"task": suite.tasks[0].id})
    env.step("The revenue was $1 \\cite{nothing}.")
    trajs.append(env.trajectory("blind#0"))
    failed = trajs[1].model_copy(deep=True)
    failed.reward = RewardBreakdown(status="judge_error", total=None)
    trajs.append(failed)

    m = rollout_metrics(trajs, kinds, step=1)
    s = RolloutSummary(kinds=kinds)
    for t in trajs:
        s.add(t)
    out = s.as_dict()
    assert out["scored"] == len(trajs) - 1 and s.judge_errors == 1
    assert math.isclose(out["mean_reward"], m["critic/score/mean"])
    assert math.isclose(out["mean_normalized_reward"], m["critic/score/normalized_mean"])
    assert 0 < out["mean_normalized_reward"] < 1  # noise: some episodes cite a distractor
    assert math.isclose(out["tool_calls_per_episode"], m["env/tool_calls/mean"])
    assert out["tool_call_episodes"] == (len(trajs) - 1) / len(trajs)  # all but the blind answer
    assert math.isclose(out["tool_call_episodes"], m["env/tool_call_episodes"])
    assert (out["opened_pages"], out["opened_official"]) == (m[OPENED], m[OPENED_OFFICIAL])
    assert 0 < out["opened_official"] < out["opened_pages"]
    assert out["official_share"] == m[OPENED_OFFICIAL] / m[OPENED]
    # no page kinds (a suite without a sandbox corpus): nothing counted by either
    bare = RolloutSummary()
    for t in trajs:
        bare.add(t)
    assert OPENED not in rollout_metrics(trajs, {}, step=1)
    assert [bare.as_dict()[k] for k in ("opened_pages", "opened_official", "official_share")] == [None] * 3
