"""The LLM judge: grades a trajectory's final report against a rubric through litellm.

``Judge.score`` grades deterministic criteria locally and sends the LLM criteria, all in one
call by default (``criteria_per_call`` splits them), with the task, the opened sources and the
report as delimited data. A reply that misses criteria or has an unknown verdict is asked again
for the criteria still missing; when the retries run out the trajectory is ``judge_error`` with
a null total. Verdicts are cached in sqlite, so re-scoring the same run makes no calls.

Identical work is done once: the prompt is a function of the input (``build_messages``), and
calls whose verdict cache keys are all equal, while one of them is in flight, wait for that one
and share its verdicts (counted as cache hits), so N identical trajectories in a batch cost one
call and get one verdict.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentrl.errors import ConfigError, MissingSetting
from agentrl.judge.bounds import Budget
from agentrl.judge.cache import VerdictCache, cache_key
from agentrl.judge.client import CallFailed, CallPool, complete
from agentrl.judge.config import JUDGE_MODEL, JudgeConfig
from agentrl.judge.evidence import evidence_of
from agentrl.judge.graders import grade_criterion
from agentrl.judge.parse import parse_reply
from agentrl.judge.prompt import JudgeInput, build_messages, judge_input, prompt_hash
from agentrl.judge.record import record_reward, resolve_rubric
from agentrl.judge.rubric import Criterion, Rubric
from agentrl.judge.score import breakdown, map_verdict
from agentrl.stopping import in_background, wait
from agentrl.trajectory import (
    VERDICTS,
    CriterionScore,
    RewardBreakdown,
    Trajectory,
    report_of,
    unanswered_reward,
)

__all__ = ["Judge", "make_judge", "run_sync", "score_trajectories"]

_ORDINAL = {"Not Satisfied": 0, "Partially Satisfied": 1, "Fully Satisfied": 2}


@dataclass
class _Stats:
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


def majority(votes: Sequence[str]) -> str:
    """The most common verdict; on a tie, the lower median of all votes (in verdict order)."""
    counts = Counter(votes).most_common()
    if len(counts) == 1 or counts[0][1] > counts[1][1]:
        return counts[0][0]
    ordered = sorted(votes, key=_ORDINAL.__getitem__)
    return ordered[(len(ordered) - 1) // 2]


class Judge:
    """Scores trajectories against rubrics. One instance can serve many calls of ``score``/``score_many``.

    Build it with ``make_judge`` (one per run), and ``close`` it (or use it as a context manager).

    >>> judge = make_judge(JudgeConfig(model="qwen3-8b", api_base="http://127.0.0.1:8000/v1"))  # doctest: +SKIP
    >>> reward = await judge.score(trajectory, load_rubric("rubrics/deep-research-report.yaml"))  # doctest: +SKIP
    """

    def __init__(self, config: JudgeConfig | None = None) -> None:
        self.config = config or JudgeConfig()
        self._cache = VerdictCache(self.config.cache_path) if self.config.cache_path else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._calls: CallPool | None = None
        self._inflight: dict[
            tuple[str, ...], asyncio.Future[tuple[dict[str, tuple[str, str]], str | None]]
        ] = {}
        self._lock = threading.Lock()

    def _pool(self) -> CallPool:
        # The pool's workers live on one event loop, and callers may use several (asyncio.run per
        # batch). Keeping the loop itself, not its id, rules out a new loop reusing a dead one's id.
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._loop is not loop or self._calls is None:
                if self._calls is not None and self._loop is not None and not self._loop.is_closed():
                    self._loop.call_soon_threadsafe(self._calls.close)
                self._loop, self._calls = loop, CallPool(self.config.concurrency)
                self._inflight = {}
            return self._calls

    def close(self) -> None:
        """Close the verdict cache and stop the call workers (when called on their event loop)."""
        with self._lock:
            if self._calls is not None and self._loop is not None and not self._loop.is_closed():
                try:
                    running = asyncio.get_running_loop()
                except RuntimeError:
                    running = None
                if running is self._loop:
                    self._calls.close()
                else:
                    self._loop.call_soon_threadsafe(self._calls.close)
            self._calls = self._loop = None
        if self._cache is not None:
            self._cache.close()
            self._cache = None

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- one call, asked again for what is missing -------------------------------------------
    async def _ask(
        self, inp: JudgeInput, criteria: list[Criterion], stats: _Stats
    ) -> tuple[dict[str, tuple[str, str]], str | None]:
        got: dict[str, tuple[str, str]] = {}
        remaining = list(criteria)
        problem = ""
        for _ in range(1 + self.config.max_parse_retries):
            messages, _tag = build_messages(inp, remaining)
            try:
                res = await complete(self.config, messages, self._pool(), [c.id for c in remaining])
            except CallFailed as e:
                stats.calls += e.attempts
                return got, str(e)
            stats.calls += res.attempts
            stats.prompt_tokens += res.prompt_tokens
            stats.completion_tokens += res.completion_tokens
            stats.cost_usd += res.cost_usd
            parsed = parse_reply(res.text, [c.id for c in remaining])
            got.update(parsed.verdicts)
            remaining = [c for c in remaining if c.id not in got]
            if not remaining:
                return got, None
            problem = "; ".join(parsed.problems)
        return got, f"judge reply unusable after {1 + self.config.max_parse_retries} tries: {problem}"

    async def _grade_chunk(
        self, inp: JudgeInput, criteria: list[Criterion], stats: _Stats
    ) -> tuple[dict[str, tuple[str, str]], str | None]:
        n = self.config.samples
        if n == 1:
            return await self._ask(inp, criteria, stats)
        runs = await asyncio.gather(*(self._ask(inp, criteria, stats) for _ in range(n)))
        errors = [err for _, err in runs if err]
        out: dict[str, tuple[str, str]] = {}
        for c in criteria:
            votes = [got[c.id] for got, _ in runs if c.id in got]
            if len(votes) == n:
                verdict = majority([v for v, _ in votes])
                out[c.id] = (verdict, next(r for v, r in votes if v == verdict))
        return out, (errors[0] if errors and len(out) < len(criteria) else None)

    async def _run_chunk(
        self, inp: JudgeInput, chunk: list[Criterion], keys: list[str], stats: _Stats, dedup: bool
    ) -> tuple[dict[str, tuple[str, str]], str | None]:
        """Grade ``chunk`` and cache its verdicts; with ``dedup``, a chunk whose keys are already
        being graded waits for that call and shares its verdicts instead of asking again."""
        if not dedup:
            return self._store(await self._grade_chunk(inp, chunk, stats), keys, chunk)
        self._pool()  # the in-flight table belongs to this event loop
        ident = tuple(keys)
        while (fut := self._inflight.get(ident)) is not None:
            try:
                got, err = await asyncio.shield(fut)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if fut.cancelled() and task is not None and not task.cancelling():
                    continue  # the call we waited for was cancelled, not us: ask ourselves
                raise
            stats.cache_hits += len(got)
            return got, err
        fut = asyncio.get_running_loop().create_future()
        self._inflight[ident] = fut
        try:
            result = self._store(await self._grade_chunk(inp, chunk, stats), keys, chunk)
        except BaseException:
            fut.cancel()
            raise
        else:
            fut.set_result(result)
        finally:
            if self._inflight.get(ident) is fut:
                del self._inflight[ident]
        return result

    def _store(
        self, result: tuple[dict[str, tuple[str, str]], str | None], keys: list[str], chunk: list[Criterion]
    ) -> tuple[dict[str, tuple[str, str]], str | None]:
        if self._cache is not None:
            for c, k in zip(chunk, keys, strict=True):
                if c.id in result[0]:
                    self._cache.put(k, *result[0][c.id])
        return result

    # ---- public API -----------------------------------------------------------------------------
    async def score(self, trajectory: Trajectory, rubric: Rubric, *, dedup: bool = True) -> RewardBreakdown:
        """Grade one trajectory's final report; never raises for judge failures (``judge_error`` instead).

        Raises ``MissingSetting`` (a ``ConfigError``) only when the rubric has LLM criteria and no judge
        ``model`` is set.
        An episode that gave no report (``report_of``) gets the env's unanswered reward, 0, unjudged.
        ``dedup=False`` asks even when the same call is in flight (``judge agreement`` samples).
        """
        if report_of(trajectory) is None:
            return unanswered_reward(trajectory.info.get("truncated_reason"))
        cfg = self.config
        inp = judge_input(
            trajectory,
            include_sources=cfg.include_sources,
            source_tools=cfg.source_tools,
            max_source_chars=cfg.max_source_chars,
        )
        budget = Budget()  # one time budget for the report's deterministic criteria
        evidence = evidence_of(trajectory) if rubric.uses_evidence else None
        graded = [
            grade_criterion(
                c,
                inp.report,
                rubric.mapping,
                rubric_hash=rubric.content_hash,
                budget=budget,
                evidence=evidence,
            )
            for c in rubric.criteria
            if not c.is_llm
        ]
        llm = [c for c in rubric.criteria if c.is_llm]
        if not llm:
            return breakdown(rubric, graded)
        if cfg.model is None:
            raise _no_model(rubric)
        stats, phash = _Stats(), prompt_hash()

        def key(c: Criterion) -> str:
            return cache_key(
                cfg, rubric_hash=rubric.content_hash, prompt_hash=phash, input_hash=inp.hash, criterion=c
            )

        def record(c: Criterion, verdict: str, reasoning: str) -> None:
            graded.append(
                CriterionScore(
                    id=c.id,
                    verdict=verdict,
                    score=map_verdict(verdict, c.kind, rubric.mapping),
                    weight=c.weight,
                    kind=c.kind,
                    grader="llm",
                    reasoning=reasoning,
                    judge_model=cfg.model,
                    rubric_hash=rubric.content_hash,
                    prompt_hash=phash,
                )
            )

        todo: list[Criterion] = []
        for c in llm:
            hit = self._cache.get(key(c)) if self._cache is not None else None
            if hit is not None and hit[0] in VERDICTS:
                stats.cache_hits += 1
                record(c, *hit)
            else:
                todo.append(c)
        size = cfg.criteria_per_call or len(todo) or 1
        chunks = [todo[i : i + size] for i in range(0, len(todo), size)]
        results = await asyncio.gather(
            *(self._run_chunk(inp, chunk, [key(c) for c in chunk], stats, dedup) for chunk in chunks)
        )
        errors: list[str] = []
        for chunk, (got, err) in zip(chunks, results, strict=True):
            for c in chunk:
                if c.id in got:
                    record(c, *got[c.id])
            if err:
                errors.append(err)
        return breakdown(
            rubric,
            graded,
            judge_model=cfg.model,
            error="; ".join(errors) or None,
            calls=stats.calls,
            cache_hits=stats.cache_hits,
            prompt_tokens=stats.prompt_tokens,
            completion_tokens=stats.completion_tokens,
            cost_usd=stats.cost_usd,
        )

    async def score_many(
        self,
        items: Sequence[tuple[Trajectory, Rubric]],
        *,
        dedup: bool = True,
        on_done: Callable[[RewardBreakdown], None] | None = None,
    ) -> list[RewardBreakdown]:
        """Grade many (trajectory, rubric) pairs concurrently (``config.concurrency`` calls in flight);
        identical ones are judged once (``dedup``). ``on_done(reward)`` as each one is graded (a
        progress count)."""
        if self.config.model is None:
            for _, rubric in items:
                if not rubric.is_deterministic:
                    raise _no_model(rubric)

        async def one(t: Trajectory, r: Rubric) -> RewardBreakdown:
            reward = await self.score(t, r, dedup=dedup)
            if on_done is not None:
                on_done(reward)
            return reward

        return list(await asyncio.gather(*(one(t, r) for t, r in items)))


def _no_model(rubric: Rubric) -> MissingSetting:
    llm = ", ".join(c.id for c in rubric.criteria if c.is_llm)
    return MissingSetting(
        f"rubric {rubric.id!r} has LLM criteria ({llm}) and the judge has no model", JUDGE_MODEL
    )


def make_judge(config: JudgeConfig | Mapping[str, Any] | None = None, *, source: str = "judge") -> Judge:
    """The one way to build a ``Judge``: from a ``JudgeConfig`` (a training config's ``judge``
    section is one) or a mapping of its fields. A bad mapping is a ``ConfigError`` naming
    ``source.field``. Build one per run and close it at the end (it holds the verdict cache)."""
    if config is None or isinstance(config, JudgeConfig):
        return Judge(config)
    try:
        return Judge(JudgeConfig.model_validate(dict(config)))
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{source}.{where}: {err['msg']}") from None


def run_sync(coro: Any) -> Any:
    """Run ``coro`` to completion from synchronous code, also when the caller is already inside an
    event loop (a notebook, an engine's async trainer): then on a private loop in a thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from inside an event loop (a notebook): on a private loop in a thread of its own, waited on
    # with stop points (a stop does not wait for a judge's server that answers late).
    return wait(in_background(asyncio.run, coro, name="agentrl-judge"))


def score_trajectories(
    trajectories: Sequence[Trajectory],
    rubric: Rubric | None,
    config: JudgeConfig,
    *,
    base_dir: str | Path = ".",
    on_done: Callable[[RewardBreakdown], None] | None = None,
) -> list[Trajectory]:
    """Score trajectories synchronously; returns copies with ``reward`` filled in (judge errors
    included) and the rubric that scored them recorded (``record_reward``).

    ``rubric`` overrides the rubric each trajectory records in ``info["rubric"]``; ``on_done(reward)``
    as each one is graded.
    """
    loaded: dict[str, Rubric] = {}
    items: list[tuple[Trajectory, Rubric]] = []
    for t in trajectories:
        spec = (t.info or {}).get("rubric")
        if rubric is None and isinstance(spec, str) and os.fspath(spec) in loaded:
            items.append((t, loaded[spec]))
            continue
        r = resolve_rubric(t, rubric, base_dir=base_dir)
        if rubric is None and isinstance(spec, str):
            loaded[spec] = r
        items.append((t, r))
    with make_judge(config) as judge:
        rewards = run_sync(judge.score_many(items, on_done=on_done))
    out = []
    for (t, r), reward in zip(items, rewards, strict=True):
        copy = t.model_copy(update={"info": dict(t.info)})
        record_reward(copy, reward, r)
        out.append(copy)
    return out
