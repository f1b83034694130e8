"""vLLM episodes give the HF path's trajectories: same token ids, logprobs and finish reasons on
every turn, from the same prompts (the expander's generation prompt), sampled concurrently."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentrl.rollout.episode import Limits, run_episodes, turn_seed
from agentrl.sampling.generate import hf_generate_batch
from agentrl.sampling.vllm_engine import VLLMEngine
from agentrl.train import TrainConfig, Trainer
from tests.policy_vllm.conftest import TINY_SPEC


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    cfg = TrainConfig.model_validate(
        {
            "model": {"path": TINY_SPEC, "tokenizer_vocab_size": 600},
            "rollout": {
                "tasks_per_step": 3,
                "group_size": 2,
                "max_turns": 3,
                "max_new_tokens": 10,
                "max_len": 2048,
                "env": {"search_k": 2, "page_chars": 300, "system_prompt": "Today is {date}. Tools: {tools}"},
            },
            "output_dir": str(tmp_path_factory.mktemp("run")),
        }
    )
    t = Trainer(cfg, progress=False)
    t.setup()
    return t


def _engine(trainer, url, **over):
    settings = trainer.cfg.vllm.model_copy(
        update={"base_url": url, "served_model": "policy", "sync": "none", **over}
    )
    return VLLMEngine(settings, default_model="x", output_dir=trainer.out, tokenizer=trainer.tokenizer)


def _stops(trainer):
    # An untrained model rarely samples its end token: one token in twelve also stops a turn,
    # so some turns end with "stop" and others hit the limit.
    return trainer.stop_ids | set(range(0, len(trainer.tokenizer), 12))


def _run(engine, trainer, jobs, envs, *, max_len=None, temperature=0.8, stops=None):
    """The episode loop with the HF sampler (``engine`` None, lock-step) or a ``VLLMEngine``."""
    r = trainer.cfg.rollout
    stops = _stops(trainer) if stops is None else stops
    limits = Limits(max_new_tokens=r.max_new_tokens, max_len=max_len or r.max_len)
    kw = dict(expander=trainer.expander, stop_ids=stops, limits=limits, executor=trainer.pool)
    if engine is None:
        gen = hf_generate_batch(trainer.model, stop_ids=stops, pad_id=trainer.pad_id, temperature=temperature)
        results = asyncio.run(run_episodes(envs, jobs, generate_batch=gen, **kw))
    else:
        results = engine.run_episodes(envs, jobs, temperature=temperature, top_p=1.0, **kw)
    return [res.trajectory for res in results]


def _envs(trainer, n):
    from agentrl.env import ResearchEnv

    return [ResearchEnv(trainer.env_config) for _ in range(n)]


def test_vllm_episodes_equal_the_hf_path(trainer, fake):
    jobs = trainer._jobs(1)
    srv = fake(model=trainer.model, latency_s=0.02)
    hf = _run(None, trainer, jobs, _envs(trainer, len(jobs)))
    vl = _run(_engine(trainer, srv.url), trainer, jobs, _envs(trainer, len(jobs)))
    assert [t.id for t in vl] == [t.id for t in hf]
    turns = 0
    for a, b in zip(hf, vl, strict=True):
        assert [m.role for m in a.messages] == [m.role for m in b.messages]
        assert [m.content for m in a.messages] == [m.content for m in b.messages]
        assert a.reward == b.reward and a.info["truncated_reason"] == b.info["truncated_reason"]
        for x, y in zip(a.messages, b.messages, strict=True):
            if x.role == "assistant":
                turns += 1
                assert x.token_ids == y.token_ids and x.finish_reason == y.finish_reason
                assert y.logprobs == pytest.approx(x.logprobs, abs=1e-5)
    assert turns == len(
        jobs
    )  # an untrained model answers in its first turn (multi-turn: test_multi_turn_tito)
    reasons = {m.finish_reason for t in vl for m in t.messages if m.role == "assistant"}
    assert reasons == {"stop", "length"}
    # Each request: the training row's prefix as the prompt, the per-turn budget, the turn's seed.
    reqs = [b for _, p, b in srv.calls if p == "/v1/completions"]
    assert len(reqs) == turns
    by_seed = {b["seed"]: b for b in reqs}
    for t, job in zip(vl, jobs, strict=True):
        sent = by_seed[turn_seed(job.seed, 0)]["prompt"]
        assert sent == trainer.expander.generation_prompt_ids(t.messages[:2])
    assert {b["max_tokens"] for b in reqs} == {trainer.cfg.rollout.max_new_tokens}
    assert {b["temperature"] for b in reqs} == {0.8}
    assert srv.max_in_flight > 1  # episodes run concurrently
    json.dumps([t.model_dump(mode="json") for t in vl])  # stores as JSONL like any rollout


def test_concurrency_is_bounded(trainer, fake):
    jobs = trainer._jobs(2)
    srv = fake(model=trainer.model, latency_s=0.03)
    _run(_engine(trainer, srv.url, concurrency=2), trainer, jobs, _envs(trainer, len(jobs)))
    assert srv.max_in_flight == 2


def test_context_limit_ends_episodes_before_any_request(trainer, fake):
    jobs = trainer._jobs(3)[:2]
    srv = fake(model=trainer.model)
    r = trainer.cfg.rollout
    first_prompt = len(trainer.expander.generation_prompt_ids(_prompt_messages(trainer, jobs[0])))
    kw = dict(max_len=first_prompt + r.max_new_tokens - 1, temperature=1.0, stops=trainer.stop_ids)
    vl = _run(_engine(trainer, srv.url), trainer, jobs, _envs(trainer, 2), **kw)
    hf = _run(None, trainer, jobs, _envs(trainer, 2), **kw)
    assert [t.info["truncated_reason"] for t in vl] == [t.info["truncated_reason"] for t in hf]
    assert vl[0].info["truncated_reason"] == "max_len" and vl[0].reward.total == 0.0
    assert not [c for c in srv.calls if c[1] == "/v1/completions"]


def _prompt_messages(trainer, job):
    env = _envs(trainer, 1)[0]
    env.reset(seed=job.seed, options={"task": job.task})
    return env.messages


def _scripted(tok):
    """Turn 1 searches, turn 2 answers (Hermes text), each ending with the sampled <|im_end|>."""
    end = tok.convert_tokens_to_ids("<|im_end|>")
    texts = [
        '<tool_call>\n{"name": "search", "arguments": {"query": "quarterly revenue"}}\n</tool_call>',
        '<tool_call>\n{"name": "answer", "arguments": {"report": "Revenue rose \\\\cite{x}."}}\n</tool_call>',
    ]
    turns = [[*tok.encode(t, add_special_tokens=False), end] for t in texts]

    def script(prompt, body):
        k = min((prompt.count(end) - 2) // 2, 1)  # system + user, then one assistant + tool per turn
        ids = turns[k]
        return ids, [-0.01 * (i + 1) - k for i in range(len(ids))], "stop"

    return turns, script


def test_multi_turn_tito(trainer, fake):
    """Turn 2 conditions on the training row's prefix, turn 1 exactly as sampled; the expanded row
    is that prompt plus turn 2, and the engine-neutral record has the logprobs where they belong."""
    from agentrl.tokens import token_trajectory

    turns, script = _scripted(trainer.tokenizer)
    srv = fake(model=trainer.model, script=script)
    jobs = trainer._jobs(4)[:2]
    vl = _run(_engine(trainer, srv.url), trainer, jobs, _envs(trainer, 2))
    reqs = {b["seed"]: b["prompt"] for _, p, b in srv.calls if p == "/v1/completions"}
    assert len(reqs) == 4
    for t, job in zip(vl, jobs, strict=True):
        assert t.info["terminated"] and t.info["tool_calls"] == 1 and t.info["turns"] == 2
        a1, a2 = (m for m in t.messages if m.role == "assistant")
        assert a1.token_ids == turns[0] and a2.token_ids == turns[1] and a2.finish_reason == "stop"
        p1, p2 = reqs[turn_seed(job.seed, 0)], reqs[turn_seed(job.seed, 1)]
        assert p2[: len(p1) + len(turns[0])] == p1 + turns[0]  # turn 1 as sampled, never re-tokenized
        assert p2 == trainer.expander.generation_prompt_ids(t.messages[:-1])
        row = trainer.expander.expand(t)
        assert row.input_ids.tolist()[: len(p2) + len(turns[1])] == p2 + turns[1]
        rec = token_trajectory(row, t)
        assert rec.prompt_ids == p1 and rec.num_turns == 2
        sampled = [lp for lp, m in zip(rec.rollout_logprobs, rec.loss_mask, strict=True) if m]
        assert sampled == pytest.approx(a1.logprobs + a2.logprobs)
        assert all(lp == 0.0 for lp, m in zip(rec.rollout_logprobs, rec.loss_mask, strict=True) if not m)
