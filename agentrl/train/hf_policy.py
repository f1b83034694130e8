"""A local transformers model as a rollout policy: ``agentrl rollout --policy hf:PATH``.

The model samples through the trainer's own engine (``HFEngine``: the batched sampler of
``agentrl.sampling.generate`` in the one episode loop), so evaluating a checkpoint before and after
training samples exactly as training does: prompts are the expander's renders of the model's chat
template, turns stop on the stop ids of the model's ``SamplingSpec`` (``agentrl.tokens.sampling_spec``:
the template's end-of-turn ∪ the model's EOS ids), and every turn keeps its sampled ids and log-probs.
"""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import replace
from pathlib import Path

from agentrl.errors import ConfigError
from agentrl.learn.policy_model import load_policy_model
from agentrl.rollout.batched import BatchedPolicy
from agentrl.rollout.context import NO_CONTEXT_POLICY
from agentrl.sampling.engines import hf_engine
from agentrl.sampling.hf import EpisodeLoop
from agentrl.tokens import sampling_spec
from agentrl.train.run_sampling import RunSampling, read_run_sampling

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
    top_p: float | None = None,
    max_tokens: int | None = None,
    env_threads: int = 4,
    run: RunSampling | None = None,
) -> BatchedPolicy:
    """The model at ``path`` (a transformers directory, or an ``agentrl train`` run or checkpoint;
    ``agentrl.learn.policy_model``) as a ``BatchedPolicy`` sampling at ``temperature`` and ``top_p``
    up to ``max_tokens`` new tokens a turn. An ``agentrl train`` run or checkpoint samples as the
    run's evaluation did (``read_run_sampling``): the spec the run recorded (``sampling.json``: stop ids,
    ``max_len``, ``max_new_tokens``, temperature — ``eval.temperature`` where the run set one — and
    ``top_p``) and the run's context policy (``rollout.context``: a run trained with
    ``drop_observations`` or ``summarize`` is evaluated with it). A transformers directory samples at
    temperature 1, top_p 1, 512 tokens a turn, without context rewrites. The arguments given
    override either. An episode also stops before its prompt plus a turn would outgrow the model's
    ``max_position_embeddings``. ``run``: the run's ``read_run_sampling(path)`` when the caller has
    read it already (``agentrl rollout`` does, for the env and the resume check)."""
    if temperature is not None and temperature <= 0:
        raise ConfigError("--temperature: the hf: policy samples; give a temperature > 0 (e.g. 0.01)")
    if run is None:  # before the weights load: a run's config error is named first
        run = read_run_sampling(path)
    loaded = load_policy_model(path, device)
    model, tok = loaded.model, loaded.tokenizer
    recorded = None if run is None else run.spec
    context = NO_CONTEXT_POLICY if run is None else run.context_policy()
    positions = getattr(model.config, "max_position_embeddings", None)
    if recorded is None:
        recorded = sampling_spec(
            tok,
            generation_config=getattr(model, "generation_config", None),
            max_len=positions,
            max_new_tokens=DEFAULT_MAX_TOKENS,
        )
    limits = [x for x in (recorded.max_len, positions) if x]
    spec = replace(
        recorded,
        max_len=min(limits) if limits else None,
        max_new_tokens=max_tokens or recorded.max_new_tokens or DEFAULT_MAX_TOKENS,
        temperature=recorded.temperature if temperature is None else temperature,
        top_p=recorded.top_p if top_p is None else top_p,
    )
    pad = tok.pad_token_id if tok.pad_token_id is not None else min(spec.stop_ids)
    pool = cf.ThreadPoolExecutor(max_workers=env_threads, thread_name_prefix="agentrl-env")
    loop = EpisodeLoop(spec, spec.expander(tok), pool, context)
    engine = hf_engine(model, loop, pad_id=pad, kv_cache_tokens=DEFAULT_KV_CACHE_TOKENS, threads="auto")
    from agentrl.learn.bases import spec_of

    name = f"hf:{spec_of(str(path))}"  # a shipped base by its name, not this machine's install path
    return BatchedPolicy(name, engine.rollout, close=lambda: pool.shutdown(wait=False))
