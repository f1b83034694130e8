"""What a documented Python snippet may take as given (``<!-- doc-test: given names="..." -->``).

Docs show fragments: "``tokenizer``" is the reader's tokenizer, "``trajectories``" what they have
stored. Each name here builds a small real one: a tokenizer trained in-process, the stored
trajectories of ``examples/trajectories/``, a tiny random model, small tensors of the right shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from tests.docs.snippets import ROOT

EXAMPLE_TRAJECTORIES = ROOT / "examples" / "trajectories" / "alphabet-oracle.jsonl"


@cache
def _trajectories() -> tuple[Any, ...]:
    from agentrl.trajectory import read_trajectories

    return tuple(read_trajectories(EXAMPLE_TRAJECTORIES))


def _good() -> Any:
    """An episode that opened the Q1 release and answered with its figure (reward 2.5)."""
    return next(t for t in _trajectories() if t.reward is not None and t.reward.total == 2.5)


@cache
def _tokenizer() -> Any:
    from agentrl.train.tokenizer import train_chat_tokenizer

    texts = [str(m.content or "") for t in _trajectories() for m in t.messages]
    return train_chat_tokenizer(texts, vocab_size=400)


def _model() -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(_tokenizer()),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=8192,
    )
    return LlamaForCausalLM(cfg).eval()


_SERVERS: list[Any] = []


def _judge_api_base() -> str:
    """The URL of a fake OpenAI-compatible judge on 127.0.0.1 (``tests.judge.fake_server``), stopped
    by ``stop_servers`` when the doc's test ends."""
    from tests.judge.fake_server import FakeJudgeServer

    server = FakeJudgeServer().start()
    _SERVERS.append(server)
    return server.url


def stop_servers() -> None:
    while _SERVERS:
        _SERVERS.pop().stop()


def _tensors() -> dict[str, Any]:
    """One batch of 2 responses x 5 tokens, the last token of row 1 masked."""
    import torch

    g = torch.Generator().manual_seed(0)
    mask = torch.ones(2, 5)
    mask[1, 4] = 0
    rewards = torch.zeros(2, 5)
    rewards[0, 4], rewards[1, 3] = 1.0, -0.5
    old = -torch.rand(2, 5, generator=g)
    return {
        "token_level_rewards": rewards,
        "values": torch.rand(2, 5, generator=g),
        "response_mask": mask,
        "old_logprob": old,
        "logprob": old + 0.05 * torch.randn(2, 5, generator=g),
    }


def _run_config() -> Any:
    """A run's ``TrainConfig``, as ``agentrl.train.run_config.load_run_config`` reads it back."""
    from agentrl.train.config import TrainConfig

    return TrainConfig.model_validate({"algorithm": {"name": "grpo"}, "rollout": {"max_len": 4096}})


GIVEN: dict[str, Callable[[], Any]] = {
    "tokenizer": _tokenizer,
    "model": _model,
    "trajectories": lambda: list(_trajectories()),
    "trajs": lambda: list(_trajectories()),
    "trajectory": _good,
    "traj": _good,
    "judge_api_base": _judge_api_base,
    "run_config": _run_config,
}
for _name in ("token_level_rewards", "values", "response_mask", "old_logprob", "logprob"):
    GIVEN[_name] = lambda _name=_name: _tensors()[_name]
