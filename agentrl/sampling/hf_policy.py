"""A local transformers model as a rollout policy: ``agentrl rollout --policy hf:PATH``.

The model samples through the trainer's own engine (``HFEngine``: the batched sampler of
``agentrl.sampling.generate`` in the one episode loop), so evaluating a checkpoint before and after
training samples exactly as training does: prompts are the expander's renders of the model's chat
template, turns stop on the stop ids of the model's ``SamplingSpec`` (``agentrl.tokens.sampling_spec``:
the template's end-of-turn ∪ the model's EOS ids), and every turn keeps its sampled ids and log-probs.
"""

from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path

from agentrl.errors import ConfigError
from agentrl.learn.policy_model import load_policy_model
from agentrl.rollout.batched import BatchedPolicy
from agentrl.sampling.hf import EpisodeLoop, HFEngine
from agentrl.tokens import sampling_spec

__all__ = ["DEFAULT_KV_CACHE_TOKENS", "DEFAULT_MAX_TOKENS", "load_hf_policy"]

DEFAULT_MAX_TOKENS = 512
#: The KV cache kept between turns, as the trainer's ``rollout.kv_cache_tokens`` default (a test pins
#: them equal): a turn prefills only its new tokens.
DEFAULT_KV_CACHE_TOKENS = 65536


def load_hf_policy(
    path: str | Path,
    *,
    device: str = "auto",
    temperature: float | None = None,
    top_p: float = 1.0,
    max_tokens: int | None = None,
    env_threads: int = 4,
) -> BatchedPolicy:
    """The model at ``path`` (a transformers directory, or an ``agentrl train`` run or checkpoint;
    ``agentrl.learn.policy_model``) as a ``BatchedPolicy`` sampling at ``temperature`` (default 1)
    up to ``max_tokens`` new tokens a turn (default 512); an episode stops before its prompt plus a
    turn would outgrow the model's ``max_position_embeddings``."""
    temp = 1.0 if temperature is None else temperature
    if temp <= 0:
        raise ConfigError("--temperature: the hf: policy samples; give a temperature > 0 (e.g. 0.01)")
    loaded = load_policy_model(path, device)
    model, tok = loaded.model, loaded.tokenizer
    spec = sampling_spec(
        tok,
        generation_config=getattr(model, "generation_config", None),
        max_len=getattr(model.config, "max_position_embeddings", None),
        max_new_tokens=max_tokens or DEFAULT_MAX_TOKENS,
        temperature=temp,
        top_p=top_p,
    )
    pad = tok.pad_token_id if tok.pad_token_id is not None else min(spec.stop_ids)
    pool = cf.ThreadPoolExecutor(max_workers=env_threads, thread_name_prefix="agentrl-env")
    loop = EpisodeLoop(spec, spec.expander(tok), pool)
    engine = HFEngine(model, loop, pad_id=pad, kv_cache_tokens=DEFAULT_KV_CACHE_TOKENS)
    return BatchedPolicy(f"hf:{path}", engine.rollout, close=lambda: pool.shutdown(wait=False))
