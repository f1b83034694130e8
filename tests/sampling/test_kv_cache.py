"""Per-episode KV caches between turns: the same ids and log-probs as prefilling every turn in full,
a turn prefills only its new tokens, a prompt that does not extend the cached ids reuses only their
common prefix, and the cache stays under its cap."""

from __future__ import annotations

import concurrent.futures as cf

import pytest
import torch

from agentrl.learn.models import build_tiny_model
from agentrl.rollout.episode import EpisodeSpec
from agentrl.sampling.engines import EpisodeLoop, HFEngine
from agentrl.sampling.generate import sample_batch
from agentrl.sampling.kv_cache import EpisodeKVCache
from agentrl.tokens import Expander, SamplingSpec
from agentrl.trajectory import Message, Trajectory
from tests.integrations.helpers import tokenizer

STOPS = {7, 8, 9}


class TalkEnv:
    """A conversation that goes on whatever the model says: each turn is answered with a user
    observation, until ``turns`` turns (an untrained model never calls a tool, so the research env
    would end its episodes after one turn)."""

    def __init__(self, turns: int = 4) -> None:
        self.turns, self.messages = turns, []

    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        self.task_id = str(options["task"])
        self.messages = [
            Message(role="system", content="You are a careful research assistant."),
            Message(role="user", content=f"Task {self.task_id}: find the quarterly revenue."),
        ]
        return "", {}

    def step(self, msg: Message):  # type: ignore[no-untyped-def]
        self.messages += [msg, Message(role="user", content=f"Observation {len(self.messages)}: page text.")]
        return "", 0.0, len(self.messages) >= 2 + 2 * self.turns, False, {}

    def trajectory(self, id: str, *, stop_reason: str | None = None) -> Trajectory:
        return Trajectory(id=id, task_id=self.task_id, messages=self.messages, info={"stop": stop_reason})


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(300, "tiny:layers=2,hidden=32,heads=2,kv_heads=1", seed=3).eval()


def _rand(n: int, seed: int) -> list[int]:
    return torch.randint(10, 300, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _sample(model, prompts, seeds, cache=None, keys=None, temperature=0.8):  # type: ignore[no-untyped-def]
    return sample_batch(
        model, prompts, seeds=seeds, stop_ids=STOPS, pad_id=0, max_new_tokens=10,
        temperature=temperature, cache=cache, keys=keys,
    )  # fmt: skip


@pytest.mark.parametrize("temperature, going", [(0.9, 4), (0.01, 3)])
def test_episodes_with_and_without_the_cache_are_the_same(temperature, going):
    """One set of episodes through the HF engine with the cache and without: same turns, same ids,
    log-probs within float rounding; with the cache, later turns prefill far fewer tokens."""
    tok = tokenizer()
    m = build_tiny_model(len(tok), "tiny:layers=2,hidden=32,heads=2,kv_heads=1", seed=5).eval()
    exp = Expander(tok)
    # An untrained model rarely samples its end token: every id but one in ``going`` also stops a turn
    # (greedy turns repeat one token: two ids in three stop them).
    stops = set(exp.stop_ids) | (set(range(len(tok))) - set(range(0, len(tok), going)))
    specs = [EpisodeSpec(f"t{k % 2}#{k}", f"t{k % 2}", 40 + k, {"sample": k}) for k in range(4)]
    with cf.ThreadPoolExecutor(2) as pool:
        loop = EpisodeLoop(SamplingSpec(frozenset(stops), 4096, 12, temperature), exp, pool)
        engines = [HFEngine(m, loop, pad_id=0, kv_cache_tokens=n) for n in (0, 100_000)]
        off, on = [e.rollout([TalkEnv() for _ in specs], specs) for e in engines]
    turns = 0
    for a, b in zip(off, on, strict=True):
        ma = [x for x in a.messages if x.role == "assistant"]
        mb = [x for x in b.messages if x.role == "assistant"]
        assert [x.token_ids for x in ma] == [x.token_ids for x in mb]
        for x, y in zip(ma, mb, strict=True):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5 / temperature)
        turns = max(turns, len(ma))
    assert turns >= 3  # several turns, so the cache was exercised
    plain, cached = engines[0].prefill, engines[1].prefill
    assert plain.prompt == cached.prompt == plain.prefilled  # without a cache, every prompt in full
    assert cached.prefilled[0] == cached.prompt[0]  # the first turn has nothing cached
    for t in range(1, turns):
        assert cached.prefilled[t] < cached.prompt[t] / 2
    cache = engines[1].kv_cache
    assert cache is not None and cache.hits > 0 and cache.misses == 0 and cache.tokens == 0


def test_a_turn_prefills_only_its_new_tokens(model):
    cache, keys = EpisodeKVCache(10_000), ["a", "b", "c"]
    prompts = [_rand(n, n) for n in (5, 17, 9)]
    for turn in range(3):
        plain = _sample(model, prompts, [turn, 2, 3])
        cached = _sample(model, prompts, [turn, 2, 3], cache, keys)
        assert [s.token_ids for s in cached] == [s.token_ids for s in plain]
        for s, c in zip(plain, cached, strict=True):
            assert c.logprobs == pytest.approx(s.logprobs, abs=1e-5)
        want = [len(p) for p in prompts] if turn == 0 else [1 + 4] * 3  # last sampled id + observation
        assert [s.prefill_tokens for s in cached] == want
        assert [s.prefill_tokens for s in plain] == [len(p) for p in prompts]
        prompts = [p + s.token_ids + _rand(4, 100 + turn) for p, s in zip(prompts, plain, strict=True)]
    assert (cache.hits, cache.misses) == (6, 0)


def test_a_prompt_that_is_not_an_extension_reuses_only_the_common_prefix(model):
    cache = EpisodeKVCache(10_000)
    prompt = _rand(20, 1)
    (first,) = _sample(model, [prompt], [1], cache, ["a"])
    history = prompt + first.token_ids
    rewritten = [*history[:6], history[6] + 1, *history[7:], *_rand(3, 2)]  # history changed at 6
    (plain,) = _sample(model, [rewritten], [5])
    (again,) = _sample(model, [rewritten], [5], cache, ["a"])
    assert again.token_ids == plain.token_ids
    assert again.logprobs == pytest.approx(plain.logprobs, abs=1e-5)
    assert again.prefill_tokens == len(rewritten) - 6
    assert cache.misses == 1
    other = [history[0] + 1, *history[1:]]  # nothing in common: a full prefill
    (full,) = _sample(model, [other], [5], cache, ["a"])
    assert full.prefill_tokens == len(other) and cache.misses == 2


def test_the_cache_stays_under_its_cap_and_drops_ended_episodes(model):
    prompts = [_rand(n, n) for n in (30, 31, 32)]
    cache = EpisodeKVCache(85)  # 30-32 prompt + 0-9 fed ids each: two of the three fit
    out = _sample(model, prompts, [1, 2, 3], cache, ["a", "b", "c"])
    assert "a" not in cache and "b" in cache and "c" in cache  # the least recently used went
    assert cache.tokens <= 85 and cache.evicted == 1
    nxt = [p + s.token_ids + [11, 12] for p, s in zip(prompts, out, strict=True)]
    again = _sample(model, nxt, [4, 5, 6], cache, ["a", "b", "c"])
    assert again[0].prefill_tokens == len(nxt[0])  # evicted: prefilled in full
    assert again[1].prefill_tokens < len(nxt[1]) and again[2].prefill_tokens < len(nxt[2])
    plain = _sample(model, nxt, [4, 5, 6])
    assert [s.token_ids for s in again] == [s.token_ids for s in plain]
    roomy = EpisodeKVCache(10_000)
    _sample(model, prompts, [1, 2, 3], roomy, ["a", "b", "c"])
    _sample(model, [nxt[1]], [7], roomy, ["b"])  # "a" and "c" are absent: their episodes ended
    assert "a" not in roomy and "c" not in roomy and "b" in roomy and roomy.evicted == 0
    small = EpisodeKVCache(10)
    _sample(model, [prompts[0]], [1], small, ["a"])  # longer than the whole cap: not kept
    assert small.tokens == 0 and small.evicted == 1


@pytest.mark.parametrize("on", [True, False])
def test_the_config_switches_the_cache(model, on):
    from agentrl.train.config import TrainConfig
    from agentrl.train.engines import make_engine

    cfg = TrainConfig.model_validate({"rollout": {"kv_cache": on, "kv_cache_tokens": 1234}})
    loop = EpisodeLoop(SamplingSpec(frozenset(STOPS)), Expander(tokenizer()), None)  # type: ignore[arg-type]
    engine = make_engine(cfg, model, loop, pad_id=0, step=0, tokenizer=None, output_dir=None)  # type: ignore[arg-type]
    assert isinstance(engine, HFEngine) and engine.kv_cache_tokens == (1234 if on else 0)
