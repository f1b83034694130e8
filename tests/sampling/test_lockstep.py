"""The trainer's HF sampler in the episode loop: lock-step batches (all live episodes in one forward
pass) give the trajectories each episode gets alone, turn for turn, with its own turn seeds."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.env import ResearchEnv
from agentrl.learn.models import build_tiny_model
from agentrl.rollout.episode import EpisodeSpec, Limits, run_episode, run_episodes
from agentrl.sampling.generate import hf_generate_batch
from agentrl.tokens import Expander
from tests.integrations.helpers import ENV_CONFIG, tasks, tokenizer


def test_hf_lockstep_equals_each_episode_alone():
    tok = tokenizer()
    model = build_tiny_model(len(tok), "tiny:layers=1,hidden=32,heads=2,kv_heads=1", seed=3).eval()
    exp = Expander(tok)
    # An untrained model rarely samples its end token: one id in five also stops a turn.
    stops = set(exp.stop_ids) | set(range(0, len(tok), 5))
    gen = hf_generate_batch(model, stop_ids=stops, pad_id=0, temperature=0.9)
    ts = tasks()
    specs = [EpisodeSpec(f"{ts[k % 3].id}#{k}", ts[k % 3], 77 + k, {"sample": k}) for k in range(12)]
    limits = Limits(max_new_tokens=8, max_len=4096)
    batched = asyncio.run(
        run_episodes([ResearchEnv(ENV_CONFIG) for _ in specs], specs, generate_batch=gen, expander=exp,
                     stop_ids=stops, limits=limits)
    )  # fmt: skip

    async def alone(spec: EpisodeSpec):  # type: ignore[no-untyped-def]
        async def one(req):  # type: ignore[no-untyped-def]
            return gen([req])[0]

        return await run_episode(
            ResearchEnv(ENV_CONFIG), spec, one, expander=exp, stop_ids=stops, limits=limits
        )

    single = [asyncio.run(alone(s)) for s in specs]
    finishes = set()
    for a, b in zip(batched, single, strict=True):
        ma = [m for m in a.trajectory.messages if m.role == "assistant"]
        mb = [m for m in b.trajectory.messages if m.role == "assistant"]
        assert [m.token_ids for m in ma] == [m.token_ids for m in mb]
        for x, y in zip(ma, mb, strict=True):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)
            finishes.add(x.finish_reason)
        assert a.trajectory.info["truncated_reason"] == b.trajectory.info["truncated_reason"]
    assert finishes == {"stop", "length"}  # both kinds of turn end were exercised
    # Different seeds, different samples: the rows are not all the same.
    firsts = {
        tuple(next(m for m in r.trajectory.messages if m.role == "assistant").token_ids) for r in batched
    }
    assert len(firsts) > 1
