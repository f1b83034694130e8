"""The training config: one typed, validated object with a default and a description for every field.

``agentrl train CONFIG.yaml`` loads a YAML file into ``TrainConfig``; unknown keys are errors that
name the file, line and field. ``agentrl train --print-config`` shows every field with its value and
description, and ``docs/config.md`` is generated from these models (``agentrl.train.config_doc``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from agentrl.errors import ConfigError
from agentrl.eval.config import AuditConfig, EvalConfig
from agentrl.judge.config import JudgeConfig
from agentrl.learn.algorithm import AlgorithmConfig
from agentrl.rollout.context import ContextConfig
from agentrl.tokens.cut import DEFAULT_MAX_LEN
from agentrl.train.config_errors import describe
from agentrl.train.config_paths import INPUT_PATHS, is_hub_id, resolve_input, resolve_paths
from agentrl.yamlload import Marks, load_yaml, read_text

__all__ = [
    "INPUT_PATHS",
    "AlgorithmConfig",
    "AuditConfig",
    "ContextConfig",
    "EvalConfig",
    "ModelConfig",
    "OptimConfig",
    "RolloutConfig",
    "TrainConfig",
    "TrainJudgeConfig",
    "VLLMSettings",
    "is_hub_id",
    "load_train_config",
    "resolve_input",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(_Strict):
    path: str = Field(
        "tiny:",
        description="a local path or hub id of a causal LM; 'base:NAME', a base agentrl ships (base:research-tiny, "
        "docs/training.md); or 'tiny:' (optionally 'tiny:layers=2,hidden=64') to build a small random model "
        "from a config, where 'copy=d' adds a copy head",
    )
    tokenizer: str | None = Field(
        None, description="tokenizer path or id; default: the model's, or for 'tiny:' one trained in-process"
    )
    tokenizer_vocab_size: int = Field(2048, ge=300, description="vocabulary size of an in-process tokenizer")
    tokenizer_max_token_length: int | None = Field(
        None,
        ge=1,
        description="an in-process tokenizer's longest token, in characters (null: no limit); short tokens "
        "split names into pieces shared with other names, so a model can copy a name it never saw",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="parameter dtype: auto = float32 weights, with bf16 autocast on a GPU"
    )
    critic_backbone: Literal["separate", "shared"] = Field(
        "separate", description="the critic's backbone: a separate copy of the policy, or the policy's own"
    )
    gradient_checkpointing: bool | Literal["auto"] = Field(
        "auto",
        description="recompute each trained layer's activations in backward (a second forward pass through "
        "the trained layers, for their memory); auto = on when one micro-batch would keep more than "
        "activation_memory_mb (measured by a probe pass at start-up, logged)",
    )
    activation_memory_mb: float | None = Field(
        None,
        gt=0,
        description="the activations one micro-batch may keep for backward before gradient_checkpointing: "
        "auto turns checkpointing on (a micro-batch: algorithm.micro_batch_tokens, or a longer row); "
        "null = 1024 on a CPU, a quarter of the GPU's memory",
    )
    lora_rank: int = Field(0, ge=0, description="LoRA rank via peft; 0 = full fine-tuning")
    trainable_layers: int = Field(
        0,
        ge=0,
        description="train only the last N decoder layers and the final norm (embeddings, lower layers and "
        "head frozen: backward stops at layer L−N; a CPU recipe for pretrained models); 0 = every parameter",
    )
    logits_chunk_tokens: int = Field(
        256,
        ge=0,
        description="log-probs and entropy through the LM head this many tokens at a time, forward and "
        "backward, so no [tokens, vocabulary] logits of a whole micro-batch are built; 0 = all at once",
    )

    @field_validator("path")
    @classmethod
    def _shipped_base(cls, value: str) -> str:
        """``base:NAME`` becomes the shipped base's directory (``agentrl.learn.bases``)."""
        from agentrl.learn.bases import resolve_model

        try:
            return resolve_model(value)
        except ConfigError as e:
            raise ValueError(str(e)) from None  # located at its line by load_train_config

    @field_serializer("path")
    def _named_base(self, value: str) -> str:
        """A shipped base is saved as ``base:NAME`` (a run's config and checkpoints do not name the
        directory this machine installed it in)."""
        from agentrl.learn.bases import spec_of

        return spec_of(value)


class RolloutConfig(_Strict):
    suite: str = Field(
        "sandbox", description="environment suite: 'sandbox' (embedded default) or a suite dir"
    )
    env: dict[str, Any] = Field(
        default_factory=dict, description="env.yaml overrides (budgets, tool_format, ...)"
    )
    tasks_per_step: int = Field(8, ge=1, description="distinct tasks per training step")
    group_size: int = Field(4, ge=1, description="samples per task (GRPO's group size n)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    max_turns: int = Field(4, ge=1, description="assistant turns per episode")
    max_new_tokens: int = Field(64, ge=1, description="tokens per assistant turn")
    max_len: int = Field(
        DEFAULT_MAX_LEN, ge=16, description="tokens per trajectory (prompt + turns + observations)"
    )
    context: ContextConfig = Field(
        default_factory=ContextConfig,
        description="context management of long episodes (docs/training.md, long episodes)",
    )
    env_workers: int = Field(8, ge=1, description="threads stepping the envs of a batch of episodes")
    backend: Literal["local", "ray"] = Field(
        "local",
        description="where the envs run: in this process, or in Ray actors (extra 'ray', docs/ray.md)",
    )
    ray_workers: int = Field(2, ge=1, description="backend ray: env actors, one CPU each, sharing the batch")
    ray_address: str | None = Field(
        None, description="backend ray: the cluster to join (e.g. 'auto'); null = start a local Ray"
    )
    engine: Literal["hf", "vllm"] = Field(
        "hf",
        description="who samples: hf = the trainer's own model, vllm = a vLLM server (see the vllm block)",
    )
    staleness: Literal[0, 1] = Field(
        0,
        description="0 = on-policy (sample, then update); 1 = one-step off-policy: step k+1 is sampled in the "
        "background, by the weights before step k's update, while step k updates (docs/async.md)",
    )
    sampler: Literal["thread", "process"] = Field(
        "thread",
        description="staleness 1 with engine hf: where the next step samples, in a thread of the trainer's "
        "process (sharing its GIL and torch threads) or in a process of its own (its own copy of the weights "
        "in shared memory, env pool and torch threads; started with spawn); docs/async.md",
    )
    torch_threads: int | None = Field(
        None,
        ge=1,
        description="torch threads of the trainer and, with staleness 1, of the background sampler (its thread "
        "or its process; each sets it: in one process torch's count is only partly per thread); "
        "null = as started (OMP_NUM_THREADS)",
    )
    sampling_threads: int | Literal["auto"] = Field(
        "auto",
        description="engine hf, staleness 0 (and the rollouts of eval:): torch's intra-op threads while the "
        "trainer's model samples on a CPU; auto = 1 for a model under 20M parameters outside its embeddings "
        "(its decode ops are too small to split, and beside a busy process split ops wait for each other), "
        "else the process's count (torch_threads); the update keeps the process's count; logged at the start",
    )
    kv_cache: bool = Field(
        True,
        description="engine hf: keep each episode's KV cache between its turns, so a turn prefills only "
        "its new tokens (false: every turn prefills the whole conversation)",
    )
    kv_cache_tokens: int = Field(
        65536,
        ge=1,
        description="engine hf: the most tokens kept in KV caches between turns, all episodes together "
        "(least recently used episodes are evicted past it)",
    )

    def env_config(self) -> dict[str, Any]:
        """The env config of the run's episodes (``ResearchEnv``'s): ``env`` with the ``suite`` and
        ``max_turns`` budget it does not set. The trainer and ``agentrl eval --policy hf:RUN``
        (which evaluates a run in the env it trained in) both take it from here."""
        env = json.loads(json.dumps(self.env))  # a deep copy
        env.setdefault("suite", self.suite)
        env.setdefault("budgets", {}).setdefault("max_turns", self.max_turns)
        return env

    @field_validator("sampling_threads")
    @classmethod
    def _threads(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("sampling_threads: a count of at least 1, or auto")
        return v

    @model_validator(mode="after")
    def _trigger_within_max_len(self) -> RolloutConfig:
        t = self.context.trigger_tokens
        if t is not None and t > self.max_len:  # it would act as max_len: say so, never silently
            raise ValueError(
                f"context.trigger_tokens ({t}) is above max_len ({self.max_len}): the episode would end "
                "at max_len before it; set it at most max_len, or leave it out (default: max_len)"
            )
        return self


class TrainJudgeConfig(JudgeConfig):
    """The run's judge: every ``JudgeConfig`` field (model, api_base, concurrency, cache_path,
    samples, temperature, ...), plus the rubric override and which reward the policy trains on."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)

    rubric: str | None = Field(
        None, description="rubric YAML for every task; default: each task's own rubric"
    )
    normalize: bool = Field(
        True, description="train on the rubric's normalized [0, 1] score rather than the weighted sum"
    )


class OptimConfig(_Strict):
    lr: float = Field(1e-5, ge=0, description="actor learning rate")
    critic_lr: float = Field(1e-5, ge=0, description="critic learning rate")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay (actor and critic)")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW's (β1, β2) (actor and critic)")
    warmup_steps: int = Field(0, ge=0, description="linear warm-up steps")
    schedule: Literal["constant", "cosine", "linear"] = Field("constant", description="after warm-up")
    grad_clip: float = Field(1.0, gt=0, description="max gradient norm")


class VLLMSettings(_Strict):
    base_url: str = Field("http://127.0.0.1:8000", description="the vLLM server's root (or its /v1) URL")
    served_model: str | None = Field(
        None, description="the server's --served-model-name; default: model.path"
    )
    api_key: str | None = Field(None, description="the server's --api-key, if it has one")
    sync: Literal["lora", "full", "nccl", "none"] = Field(
        "full",
        description="weight sync after each update: lora = hot-swap the adapter, full = reload from sync_dir, "
        "nccl = GPU broadcast, none = never",
    )
    sync_dir: str | None = Field(
        None,
        description="dir shared with the server (full: the dir vllm serves); default: OUTPUT_DIR/vllm_sync",
    )
    lora_name: str = Field("agentrl-policy", description="prefix of the adapter names loaded into the server")
    timeout_s: float = Field(300.0, gt=0, description="timeout of one generation request (seconds)")
    sync_timeout_s: float = Field(600.0, gt=0, description="timeout of one weight-sync request (seconds)")
    retries: int = Field(3, ge=0, description="retries of a generation request on transport errors, 429, 5xx")
    concurrency: int = Field(64, ge=1, description="generation requests in flight at once")
    logprobs_processed: bool = Field(
        True,
        description="the server runs with --logprobs-mode processed_logprobs; if not, logprobs sampled at "
        "temperature ≠ 1 or top-p < 1 are dropped and recomputed by the trainer",
    )
    nccl_master_address: str = Field("127.0.0.1", description="sync nccl: address of the trainer (rank 0)")
    nccl_master_port: int = Field(29555, ge=1, le=65535, description="sync nccl: port of the NCCL rendezvous")


class TrainConfig(_Strict):
    algorithm: AlgorithmConfig = Field(
        default_factory=AlgorithmConfig,
        description="the advantage estimator (PPO, GRPO, RLOO, REINFORCE++), its losses and the batching "
        "of the update",
    )
    model: ModelConfig = Field(
        default_factory=ModelConfig,
        description="the policy: a local path, hub id or tiny: model, its tokenizer, dtype, critic and "
        "which parameters train",
    )
    rollout: RolloutConfig = Field(
        default_factory=RolloutConfig,
        description="the episodes of a step: suite, tasks and samples per step, sampling, budgets, the "
        "engine that samples and where the envs run",
    )
    judge: TrainJudgeConfig = Field(
        default_factory=TrainJudgeConfig,
        description="a JudgeConfig (docs/judge.md: model, api_base, concurrency, ... — the LLM judge, for "
        "rubrics with LLM criteria) plus rubric (override every task's rubric) and normalize (train on "
        "the judge's normalised [0, 1] reward)",
    )
    optim: OptimConfig = Field(
        default_factory=OptimConfig, description="the AdamW optimisers and the learning-rate schedule"
    )
    vllm: VLLMSettings = Field(
        default_factory=VLLMSettings,
        description="for rollout.engine: vllm: the server's base_url, served_model, the weight sync mode "
        "and sync_dir, timeouts, concurrency (docs/vllm.md)",
    )
    eval: EvalConfig = Field(
        default_factory=EvalConfig,
        description="evaluation during training and the audit judge (docs/eval.md)",
    )
    steps: int = Field(20, ge=0, description="training steps (rollout → judge → expand → update)")
    sft_steps: int = Field(
        0, ge=0, description="supervised warm-start steps on oracle trajectories before RL"
    )
    sft_noise: float = Field(0.3, ge=0, le=1, description="oracle noise for the warm-start data")
    sft_episodes: int = Field(256, ge=1, description="oracle episodes of warm-start data (tasks are cycled)")
    sft_lr: float = Field(1e-3, ge=0, description="learning rate of the warm start")
    sft_batch_size: int = Field(
        16,
        ge=1,
        description="trajectories per warm-start step (run in micro-batches of algorithm.micro_batch_tokens)",
    )
    seed: int = Field(0, description="seed of models, sampling and task order")
    output_dir: str = Field("runs/train", description="metrics.jsonl, trajectories, checkpoints, plots")
    checkpoint_every: int = Field(
        10,
        ge=0,
        description="save a checkpoint every k RL steps (and always after the warm start and at the end); "
        "0 = only those two. 10: a kill loses at most ~25-40 s of the CPU quickstart, for ~0.01 s "
        "a checkpoint (docs/training.md)",
    )
    sft_checkpoint_every: int = Field(
        25,
        ge=0,
        description="save a checkpoint every k warm-start steps, so a kill during the warm start resumes "
        "mid-way; 0 = none until it ends",
    )
    checkpoint_keep: int = Field(3, ge=0, description="RL checkpoints kept (the newest); 0 = keep every one")
    parallelism: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="under torchrun: ddp replicates the model; fsdp (FSDP2) shards weights, grads and optimiser state",
    )
    device: str = Field("auto", description="'auto' (cuda if available), 'cpu', 'cuda', 'cuda:1', ...")
    log_tensorboard: bool = Field(False, description="also log to TensorBoard (when installed)")
    log_wandb: bool = Field(False, description="also log to Weights & Biases (when installed)")
    log_token_stats: bool = Field(
        True, description="keep each update's per-token numbers in tokens/step_NNNNN.npz (for explain/report)"
    )

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.algorithm.name in ("grpo", "rloo") and self.rollout.group_size < 2:
            raise ValueError(
                f"{self.algorithm.name} compares samples of one task: rollout.group_size must be ≥ 2"
            )
        if self.algorithm.dynamic_sampling.enable and self.rollout.staleness == 1:
            raise ValueError(
                "algorithm.dynamic_sampling refills a step with more rollouts while rollout.staleness 1 "
                "already samples the next step in the background: use one of them"
            )
        if self.model.trainable_layers > 0 and self.model.lora_rank > 0:
            raise ValueError(
                "model.trainable_layers and model.lora_rank both choose what trains: set one of them"
            )
        r = self.rollout
        if self.model.lora_rank > 0 and _has_copy_head(self.model.path):
            raise ValueError(
                "model.lora_rank: LoRA adapters would leave a copy head untrained; train it whole"
            )
        if r.engine == "vllm" and _has_copy_head(self.model.path):
            raise ValueError(
                "model.path has a copy head, which runs in agentrl's own sampler only: "
                "vLLM has no such architecture; use rollout.engine: hf"
            )
        if r.sampler == "process" and r.staleness == 1 and (r.engine != "hf" or r.backend != "local"):
            raise ValueError(
                "rollout.sampler: process runs the hf engine and local envs in a process of its own; "
                f"with engine {r.engine} and backend {r.backend} use sampler: thread"
            )
        overlong = self.algorithm.overlong
        if overlong.enable and overlong.max_tokens is None:  # the most policy tokens an episode samples
            overlong.max_tokens = self.rollout.max_turns * self.rollout.max_new_tokens
        if overlong.enable and overlong.max_tokens is not None and overlong.len >= overlong.max_tokens:
            raise ValueError(
                f"algorithm.overlong.len ({overlong.len}) must be below its max_tokens ({overlong.max_tokens})"
            )
        return self


def _has_copy_head(path: str) -> bool:
    """Whether ``model.path`` is a ``tiny:`` spec with ``copy=d`` (d > 0) or a saved copy-head model."""
    if path.startswith("tiny:"):
        from agentrl.learn.models import parse_tiny_spec

        return bool(parse_tiny_spec(path)["copy"])
    config = Path(path) / "config.json"
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("model_type") == "agentrl_copy"
    except (OSError, ValueError, AttributeError):
        return False


def load_train_config(
    path: str | Path | None, overrides: dict[str, Any] | None = None, *, allow_empty: bool = False
) -> TrainConfig:
    """Load a YAML config; errors name ``file:line:column`` and the dotted field. Duplicate keys are
    errors; relative input paths (``INPUT_PATHS``) that do not exist from the working directory are
    taken from the config file's directory, and one found in neither is an error listing both.

    ``overrides`` (``--set KEY=VALUE``: dotted key → value) replace the file's values; an error in
    one names ``--set KEY=VALUE``, not the file. A file that sets nothing (empty, comments only,
    ``{}``, ``/dev/null``) is an error unless ``allow_empty`` (``agentrl train --defaults``): a typo'd
    path to an empty file must not start a full default run. ``path`` None: every default."""
    source = "<defaults>" if path is None else str(path)
    data: Any = None
    marks: Marks = {}
    if path is not None:
        path = Path(path)
        text = read_text(path, error=ConfigError, missing="no such file", what="config")
        data, marks = load_yaml(text, source, error=ConfigError)
        if (data is None or data == {}) and not allow_empty:
            raise ConfigError(
                f"{source}: the config is empty (it sets no field); write the settings to train with "
                "(examples/quickstart.yaml), or pass --defaults to train with every default "
                "(--print-config shows them)"
            )
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a training config must be a mapping")
    given: dict[tuple[str, ...], str] = {}  # key path → how the --set was written
    for key, value in (overrides or {}).items():
        cur = data
        *parents, last = key.split(".")
        given[tuple(key.split("."))] = f"--set {key}={value if isinstance(value, str) else _json(value)}"
        for p in parents:
            cur = cur.setdefault(p, {})
            if not isinstance(cur, dict):
                raise ConfigError(f"--set {key}: {p} is not a section")
        cur[last] = value
    try:
        resolve_paths(data, Path(source).parent if path is not None else Path.cwd())
    except ConfigError as e:
        loc = str(e).split(" ", 1)[0].split(".")
        if (flag := _set_flag(given, loc)) is not None:
            raise ConfigError(f"{flag}: {e}") from None
        line, col = _locate(marks, loc)
        raise ConfigError(f"{source}:{line}:{col}: {e}" if line else f"{source}: {e}") from None
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as e:

        def where(loc: tuple[str | int, ...]) -> str:
            if (flag := _set_flag(given, loc)) is not None:
                return flag
            line, col = _locate(marks, loc)
            return f"{source}:{line}:{col}" if line else source

        raise ConfigError(describe(e, TrainConfig, where)) from None


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def _set_flag(given: dict[tuple[str, ...], str], loc: Sequence[str | int]) -> str | None:
    """The ``--set`` an error at ``loc`` is about: one whose key path is ``loc``, a prefix of it
    (``--set model={...}``) or under it (``--set rollout.max_turns=0`` failing the rollout section)."""
    loc = tuple(str(p) for p in loc)
    for key, flag in given.items():
        n = min(len(key), len(loc))
        if n and key[:n] == loc[:n]:
            return flag
    return None


def _locate(marks: Marks, loc: Sequence[str | int]) -> tuple[int, int]:
    """Line and column (1-based) of the deepest existing key on ``loc``; (0, 0) when not even
    its first key is in the file."""
    for n in range(len(loc), 0, -1):
        if (found := marks.get(tuple(loc[:n]))) is not None:
            return found
    return (0, 0)
