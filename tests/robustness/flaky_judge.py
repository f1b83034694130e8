"""A flaky judge on 127.0.0.1, and the load run that drives ``agentrl judge`` against it.

``FlakyJudgeServer`` is the fake OpenAI-compatible judge of ``tests/judge/fake_server.py`` (it
grades a criterion "Fully Satisfied" when the report contains the phrases the criterion quotes in
backticks) with faults injected into a share of its replies: HTTP 500s, hangs longer than the
client's timeout, bodies that are not JSON, replies whose content is not JSON, unknown verdict
strings, and missing criteria. Which request fails, and how, is decided by a hash of the seed,
the report and how many requests that report has had, so a run is reproducible whatever the
scheduling. ``run_load`` writes ``n`` trajectories with known correct scores, runs the real CLI
(``python -m agentrl judge``, litellm over HTTP) as a subprocess and checks every output record.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from tests.judge.fake_server import FakeJudgeServer, chat_completion, read_prompt

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ("http500", "timeout", "bad_body", "not_json", "bad_verdict", "missing")

RUBRIC = """\
id: flaky-load
mapping: strict
aggregation: weighted_sum
criteria:
  - id: figure
    text: States the `Q1 2025` figure.
    weight: 1.0
  - id: temporal
    text: Says the full-year report is `not published` yet.
    weight: 1.0
  - id: citation
    text: Cites its sources.
    weight: 0.5
    grader: {type: regex, pattern: '\\\\cite\\{[^}]+\\}'}
  - id: rumor
    kind: negative
    text: States the `trillion` rumour as fact.
    weight: -1.0
"""
# (criterion, the phrase that satisfies it, its weight); strict mapping: a criterion counts fully or not.
CRITERIA = (
    ("figure", "Q1 2025", 1.0),
    ("temporal", "not published", 1.0),
    ("citation", "\\cite{release}", 0.5),
    ("rumor", "trillion", -1.0),
)


def make_report(i: int, seed: int = 0) -> tuple[str, float]:
    """The i-th report (unique) and its correct score under ``RUBRIC``."""
    rng = random.Random(f"{seed}:{i}")
    parts, score = [f"Report {i}."], 0.0
    for _cid, phrase, weight in CRITERIA:
        if rng.random() < 0.5:
            parts.append(f"It mentions {phrase}.")
            score += weight
    return " ".join(parts), score


def write_inputs(directory: Path, n: int, seed: int = 0) -> tuple[Path, Path, dict[str, float]]:
    """Write ``n`` trajectories and the rubric; returns (trajectories, rubric, correct score by id)."""
    from agentrl.trajectory import Message, Trajectory, write_trajectories

    expected: dict[str, float] = {}
    trajs = []
    for i in range(n):
        report, score = make_report(i, seed)
        tid = f"load-{i}#0"
        expected[tid] = score
        trajs.append(
            Trajectory(
                id=tid,
                task_id=f"load-{i}",
                messages=[
                    Message(role="user", content="Summarise the company's 2025 results."),
                    Message(role="assistant", content=report),
                ],
            )
        )
    traj_path, rubric_path = directory / "trajectories.jsonl", directory / "rubric.yaml"
    write_trajectories(traj_path, trajs)
    rubric_path.write_text(RUBRIC, encoding="utf-8")
    return traj_path, rubric_path, expected


class FlakyJudgeServer(FakeJudgeServer):
    """The fake judge, failing ``failure_rate`` of its requests with the faults in ``faults``."""

    def __init__(self, failure_rate: float = 0.3, hang_s: float = 3.0, seed: int = 0, faults=FAULTS) -> None:
        super().__init__()
        self.failure_rate, self.hang_s, self.seed, self.fault_kinds = (
            failure_rate,
            hang_s,
            seed,
            tuple(faults),
        )
        self.per_report: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()

    def fault(self, report: str, n: int) -> str | None:
        """The fault for the n-th request (1-based) about ``report``, or None for a good reply."""
        digest = hashlib.sha256(f"{self.seed}:{n}:{report}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        if u >= self.failure_rate:
            return None
        return self.fault_kinds[digest[8] % len(self.fault_kinds)]

    def garbage(self, fault: str, verdicts: list[dict[str, str]], rng: random.Random) -> str:
        """The reply content for a content fault."""
        if fault == "not_json":
            return rng.choice(
                ["The report looks fine to me.", '{"criteria": [{"id": "figure", "verdict": ', ""]
            )
        if fault == "bad_verdict":
            bad = [dict(v) for v in verdicts]
            for v in rng.sample(bad, rng.randint(1, len(bad))):
                v["verdict"] = rng.choice(["Mostly Satisfied", "yes", "N/A", "", 1, None])
            return json.dumps({"criteria": bad})
        # missing: a strict subset of the criteria, or none at all
        keep = rng.sample(verdicts, rng.randint(0, len(verdicts) - 1))
        return json.dumps({"criteria": keep} if keep or rng.random() < 0.5 else {"verdicts": verdicts})

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        user = next((m["content"] for m in body["messages"] if m["role"] == "user"), "")
        _tag, report, _criteria, _outside = read_prompt(user)
        key = report or ""
        self.per_report[key] += 1
        n = self.per_report[key]
        fault = self.fault(key, n)
        self.injected[fault or "none"] += 1
        self.requests.append({"report": key, "n": n, "fault": fault})
        rng = random.Random(f"{self.seed}:{n}:{key}:garbage")
        if fault == "timeout":  # hang past the client's timeout, then answer to nobody
            await asyncio.sleep(self.hang_s)
        if fault == "http500":
            return web.json_response(
                {"error": {"message": "internal error", "type": "server_error"}}, status=500
            )
        if fault == "bad_body":
            return web.Response(
                status=200, text='{"id": "chatcmpl-1", "choices": [{"mess', content_type="application/json"
            )
        verdicts = self.verdicts(user)
        content = (
            self.garbage(fault, verdicts, rng) if fault in ("not_json", "bad_verdict", "missing") else None
        )
        if content is None:
            content = json.dumps({"criteria": verdicts})
        return web.json_response(chat_completion(n, body.get("model", ""), content, user))


@dataclass
class LoadResult:
    """What one load run did and found."""

    episodes: int
    ok: int = 0
    judge_error: int = 0
    requests: int = 0
    client_calls: int = 0
    injected: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def retries(self) -> int:
        """Requests beyond the first one per LLM-judged trajectory."""
        return self.requests - self.episodes


def check_output(out: Path, expected: dict[str, float], result: LoadResult) -> None:
    """Every trajectory exactly once, in order; each ``ok`` with its correct score or ``judge_error``."""
    from agentrl.trajectory import read_trajectories

    got = list(read_trajectories(out))
    ids = [t.id for t in got]
    if ids != list(expected):
        missing = set(expected) - set(ids)
        dup = [i for i, c in Counter(ids).items() if c > 1]
        result.problems.append(
            f"ids differ: {len(missing)} missing, {len(dup)} duplicated, {len(ids)} in all"
        )
    for t in got:
        r = t.reward
        if r is None:
            result.problems.append(f"{t.id}: no reward")
            continue
        result.client_calls += r.calls
        if r.status == "ok":
            result.ok += 1
            if r.total is None or abs(r.total - expected.get(t.id, float("nan"))) > 1e-9:
                result.problems.append(f"{t.id}: scored {r.total}, correct is {expected.get(t.id)}")
        elif r.status == "judge_error":
            result.judge_error += 1
            result.errors[(r.error or "").split(":")[0][:60]] += 1
            if r.total is not None or not r.error:
                result.problems.append(f"{t.id}: judge_error with total {r.total} and error {r.error!r}")
        else:
            result.problems.append(f"{t.id}: status {r.status}")


def run_load(
    directory: Path,
    n: int,
    *,
    via: str = "cli",
    failure_rate: float = 0.3,
    timeout_s: float = 1.0,
    max_retries: int = 4,
    backoff_base_s: float = 1.0,
    concurrency: int = 32,
    seed: int = 0,
) -> LoadResult:
    """Judge ``n`` generated trajectories against a flaky loopback judge and check the output.

    ``via="cli"`` runs ``python -m agentrl judge`` in a subprocess (its default backoff, 1 s
    doubling); ``via="api"`` calls what that command calls, ``score_trajectories`` and the store,
    in this process, with ``backoff_base_s`` (short backoffs keep the test fast).
    """
    traj, rubric, expected = write_inputs(directory, n, seed)
    out = directory / "judged.jsonl"
    result = LoadResult(episodes=n)
    with FlakyJudgeServer(failure_rate=failure_rate, hang_s=timeout_s + 1.0, seed=seed) as server:
        t0 = time.perf_counter()
        if via == "cli":
            env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT)}
            cmd = [
                sys.executable, "-m", "agentrl", "judge", str(traj), "--rubric", str(rubric), "--out", str(out),
                "--model", "flaky", "--api-base", server.url, "--timeout", str(timeout_s),
                "--max-retries", str(max_retries), "--concurrency", str(concurrency), "--no-cache", "--json",
            ]  # fmt: skip
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=directory)
            if proc.returncode != 0:
                result.problems.append(f"agentrl judge exited {proc.returncode}: {proc.stderr[-2000:]}")
        else:
            from agentrl.judge import JudgeConfig, load_rubric, score_trajectories
            from agentrl.trajectory import read_trajectories, write_trajectories

            config = JudgeConfig(
                model="flaky",
                api_base=server.url,
                timeout_s=timeout_s,
                max_retries=max_retries,
                backoff_base_s=backoff_base_s,
                concurrency=concurrency,
            )
            judged = score_trajectories(list(read_trajectories(traj)), load_rubric(rubric), config)
            write_trajectories(out, judged)
        result.wall_s = time.perf_counter() - t0
        result.requests = len(server.requests)
        result.injected = dict(server.injected)
    if not result.problems:
        check_output(out, expected, result)
    return result
