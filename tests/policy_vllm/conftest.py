"""Shared pieces: a tiny model and tokenizer, and fake vLLM servers that are always closed."""

from __future__ import annotations

import json

import pytest

from agentrl.learn.models import build_tiny_model
from tests.policy_vllm.fake_vllm import FakeVLLM
from tests.tokens.fixtures import make_tokenizer_cached

TINY_SPEC = "tiny:layers=1,hidden=32,heads=2,kv_heads=1"

# The trainer runs of these tests: 4 trajectories a step, one optimiser step over all of them.
BASE = {
    "model": {"path": TINY_SPEC, "tokenizer_vocab_size": 600},
    "rollout": {
        "tasks_per_step": 2,
        "group_size": 2,
        "max_turns": 2,
        "max_new_tokens": 8,
        "max_len": 2048,
        "env": {"search_k": 2, "page_chars": 300, "system_prompt": "Today is {date}. Tools: {tools}"},
    },
    # Untrained policies earn no reward; the entropy bonus gives every update a gradient.
    "algorithm": {"mini_batch_size": 4, "micro_batch_tokens": 4096, "entropy_coef": 0.01},
    "optim": {"lr": 1e-2},
    "steps": 2,
    "sft_steps": 0,
}


def base_config(out, **over):
    """``BASE`` with ``output_dir=out`` and dotted ``section.field`` (or top-level) overrides."""
    from agentrl.train import TrainConfig

    data = json.loads(json.dumps(BASE))
    data["output_dir"] = str(out)
    for key, value in over.items():
        section, _, field = key.rpartition(".")
        (data.setdefault(section, {}) if section else data)[field] = value
    return TrainConfig.model_validate(data)


@pytest.fixture(scope="session")
def hf_run(tmp_path_factory):
    """The reference: ``BASE`` trained in this process with the HF engine, a checkpoint every step."""
    from agentrl.train import Trainer

    out = tmp_path_factory.mktemp("hf")
    trainer = Trainer(base_config(out, checkpoint_every=1), progress=False)
    trainer.run()
    return trainer, out


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer_cached("chatml")


@pytest.fixture(scope="module")
def model(tok):
    return build_tiny_model(len(tok), TINY_SPEC, seed=3).eval()


@pytest.fixture
def fake():
    """``fake(**kw)`` starts a ``FakeVLLM``; every server is closed after the test."""
    servers: list[FakeVLLM] = []

    def start(**kw) -> FakeVLLM:
        servers.append(FakeVLLM(**kw))
        return servers[-1]

    yield start
    for s in servers:
        s.close()
