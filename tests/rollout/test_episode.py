"""The one episode loop: lock-step batching equals one request at a time, limits, stops, seeds."""

from __future__ import annotations

import asyncio
import hashlib
from types import SimpleNamespace

import pytest

from agentrl.env import ResearchEnv
from agentrl.rollout.episode import (
    EpisodeSpec,
    Generation,
    Limits,
    Stop,
    episode_seed,
    policy_generate,
    run_episode,
    run_episodes,
    turn_seed,
)
from agentrl.seeds import stable_seed
from agentrl.tokens import Expander
from agentrl.trajectory import Message
from tests.integrations.helpers import ENV_CONFIG, OracleEngine, tasks, tokenizer


def _specs(n: int) -> list[EpisodeSpec]:
    ts = tasks()
    return [
        EpisodeSpec(f"{ts[k % len(ts)].id}#{k}", ts[k % len(ts)], 1000 + k, {"sample": k, "seed": 1000 + k})
        for k in range(n)
    ]


class MixedEngine:
    """The oracle's turns as token ids, except that some turns (chosen by the turn's seed) are cut
    junk without a stop token, so episodes end at different turns for different reasons."""

    def __init__(self) -> None:
        self.oracle = OracleEngine(tasks())
        self.batches: list[list[tuple[int, int]]] = []  # per call: (episode index, turn)

    async def one(self, req) -> Generation:  # type: ignore[no-untyped-def]
        if req.seed % 5 == 0:
            return Generation([7] * req.max_tokens, [-1.0] * req.max_tokens)
        return await self.oracle.generate(req.prompt_ids, req.max_tokens)

    async def batch(self, reqs) -> list[Generation]:  # type: ignore[no-untyped-def]
        self.batches.append([(r.index, r.turn) for r in reqs])
        return [await self.one(r) for r in reqs]


def _dump(results) -> list[dict]:  # type: ignore[no-untyped-def]
    out = []
    for r in results:
        d = r.trajectory.model_dump(mode="json")
        d["info"].pop("elapsed_s")
        for e in d["info"]["tool_log"]:
            e.pop("seconds")
        out.append(d)
    return out


def _run(n: int, *, batched: bool):  # type: ignore[no-untyped-def]
    engine = MixedEngine()
    limits = Limits(max_new_tokens=256)
    envs = [ResearchEnv(ENV_CONFIG) for _ in range(n)]
    kw = {"generate_batch": engine.batch} if batched else {"generate": engine.one}
    results = asyncio.run(run_episodes(envs, _specs(n), expander=Expander(tokenizer()), limits=limits, **kw))
    return engine, results


def test_lockstep_batches_equal_one_request_at_a_time():
    n = 8
    batched, res_b = _run(n, batched=True)
    _, res_one = _run(n, batched=False)
    assert _dump(res_b) == _dump(res_one)
    reasons = {r.trajectory.info["truncated_reason"] for r in res_b}
    assert {None, "generation_limit"} <= reasons and len({r.turns for r in res_b}) > 1
    # One call per turn, with every live episode of that turn, in episode order.
    turns = [r.turns for r in res_b]
    assert len(batched.batches) == max(turns)
    for t, batch in enumerate(batched.batches):
        assert batch == [(i, t) for i in range(n) if turns[i] > t]
    for r in res_b:
        assert r.trajectory.info["sample"] == int(r.trajectory.id.split("#")[1])
        assert list(r.trajectory.info)[-2:] == ["sample", "seed"]  # spec.info, in its order
        assert r.generate_s >= 0 and r.env_s > 0 and r.wall_s >= r.env_s


def test_context_limit_stops_before_the_turn_that_would_not_fit():
    spec = _specs(1)[0]
    exp = Expander(tokenizer())
    env = ResearchEnv(ENV_CONFIG)
    env.reset(seed=spec.seed, options={"task": spec.task})
    first = len(exp.generation_prompt_ids(env.messages))
    for max_len, requests in ((first + 100, 3), (first + 99, 0)):
        engine = OracleEngine(tasks())
        limits = Limits(max_new_tokens=100, max_len=max_len)
        res = asyncio.run(run_episode(ResearchEnv(ENV_CONFIG), spec, lambda r, e=engine: e.generate(r.prompt_ids, r.max_tokens), expander=exp, limits=limits))  # fmt: skip
        if requests == 0:
            assert engine.prompts == [] and res.stop_reason == "max_len"
            assert res.trajectory.info["status"] == "unanswered" and res.trajectory.reward.total == 0.0
        else:  # prompt + max_new_tokens == max_len still fits; later turns are longer and stop
            assert len(engine.prompts) >= 1 and res.prompt_ids == engine.prompts[0]


def test_completion_budget_caps_each_turn_and_ends_the_episode():
    spec = _specs(1)[0]
    seen: list[tuple[int, int]] = []
    engine = OracleEngine(tasks())

    async def gen(req):  # type: ignore[no-untyped-def]
        seen.append((len(req.prompt_ids), req.max_tokens))
        return await engine.generate(req.prompt_ids, req.max_tokens)

    # Turn 1 (the oracle's search, 43 ids) fits; its observation leaves turn 2 less than 60 tokens.
    limits = Limits(max_new_tokens=60, max_completion_tokens=1100)
    res = asyncio.run(
        run_episode(ResearchEnv(ENV_CONFIG), spec, gen, expander=Expander(tokenizer()), limits=limits)
    )
    first = seen[0][0]
    assert len(seen) == 2 and seen[0][1] == 60 and 0 < seen[1][1] < 60
    for p, m in seen:
        assert m == min(60, 1100 - (p - first))
    assert res.stop_reason == "generation_limit" and res.trajectory.info["status"] == "unanswered"


def test_a_turn_without_a_stop_token_is_a_generation_limit_whatever_the_engine_says():
    spec = _specs(1)[0]

    async def gen(req):  # type: ignore[no-untyped-def]
        # an engine's own type that claims a stop; no stop token at the end: a cut turn
        return SimpleNamespace(token_ids=[11, 12, 13], logprobs=None, finish_reason="stop")

    res = asyncio.run(run_episode(ResearchEnv(ENV_CONFIG), spec, gen, expander=Expander(tokenizer())))
    msg = [m for m in res.trajectory.messages if m.role == "assistant"]
    assert res.stop_reason == "generation_limit" and len(msg) == 1 and msg[0].finish_reason == "length"
    assert res.trajectory.info["truncated_reason"] == "generation_limit"


def test_stop_ends_with_its_reason_and_chat_turns_cut_by_max_tokens_go_on():
    spec = _specs(1)[0]
    calls: list[int] = []

    async def gen(req):  # type: ignore[no-untyped-def]
        calls.append(req.turn)
        if req.turn == 0:
            return Message(role="assistant", content="half a sent", finish_reason="length")
        return Stop("stored_turns_ended")

    res = asyncio.run(run_episode(ResearchEnv(ENV_CONFIG), spec, gen))
    assert calls == [0, 1] and res.stop_reason == "stored_turns_ended" and res.turns == 2
    assert res.trajectory.info["truncated_reason"] == "stored_turns_ended"
    assert res.trajectory.info["status"] == "unanswered" and res.trajectory.reward.total == 0.0


def test_seeds_are_the_documented_hashes_and_reach_the_policy():
    def sha(text: str) -> bytes:
        return hashlib.sha256(text.encode()).digest()

    assert episode_seed(3, "t", 2) == int.from_bytes(sha("3:t:2")[:4], "big") & 0x7FFFFFFF
    assert turn_seed(1234, 5) == int.from_bytes(sha("1234:5")[:8], "big") & 0x7FFFFFFFFFFFFFFF
    # The trainer's task/update seeds and the oracle's per-episode choice keep their widths too.
    assert stable_seed(0, "tasks", 1, bits=31) == int.from_bytes(sha("0:tasks:1")[:8], "big") & 0x7FFFFFFF
    assert stable_seed(9, "t", bits=64) == int.from_bytes(sha("9:t")[:8], "big")
    spec = _specs(1)[0]
    seen: list[tuple[int | None, int]] = []

    class Recorder:
        name = "recorder"

        async def act(self, messages, ctx):  # type: ignore[no-untyped-def]
            seen.append((ctx.seed, len(messages)))
            return Message(role="assistant", content="The answer.")

    gen = policy_generate(Recorder())

    async def traced(req):  # type: ignore[no-untyped-def]
        assert req.seed == turn_seed(spec.seed, req.turn)
        return await gen(req)

    asyncio.run(run_episode(ResearchEnv(ENV_CONFIG), spec, traced))
    assert seen and all(s == spec.seed for s, _ in seen)


def test_one_of_generate_and_generate_batch():
    with pytest.raises(ValueError, match="exactly one"):
        asyncio.run(run_episodes([], []))


def test_an_episode_is_drawn_by_one_rule_for_every_caller():
    """``EpisodeSpec.drawn``: what ``agentrl rollout``, the trainer's step and its evaluation each wrote
    (id ``task#sample``, the seed from ``episode_seed``, ``info`` sample, seed, then the caller's)."""
    from agentrl.env.suite import Task
    from agentrl.rollout.runner import policy_episode_spec
    from agentrl.rollout.turns import EpisodeSpec
    from agentrl.seeds import episode_seed

    task = Task(id="acme-q1", prompt="q", date="2025-01-01", rubric="r")
    plain = EpisodeSpec.drawn(task, 3, 7, policy="oracle")
    assert (plain.id, plain.seed) == ("acme-q1#3", episode_seed(7, "acme-q1", 3))
    assert list(plain.info.items()) == [("sample", 3), ("seed", plain.seed), ("policy", "oracle")]
    assert policy_episode_spec(task, 3, 7, "oracle") == plain
    stepped = EpisodeSpec.drawn(task, 3, 7, step=2)
    assert stepped.seed == episode_seed(7, "acme-q1", 3, step=2) != plain.seed
    assert dict(stepped.info) == {"sample": 3, "seed": stepped.seed}
