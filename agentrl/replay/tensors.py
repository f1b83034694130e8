"""Rebuild the exact training tensors of stored trajectories, as the trainer built them.

The batch comes from ``agentrl.learn.batch.build_batch`` (the same expander rows, the same reward
placement on the last policy token, the same drops) and its advantages from
``agentrl.learn.advantages.compute_advantages``, the functions the trainer calls; nothing here
re-implements either. PPO values come from
a training run's stored numbers, a critic checkpoint, or are zero. The result is deterministic:
``save_tensors`` writes the same bytes for the same inputs.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from agentrl.atomic import write_atomic
from agentrl.errors import ConfigError
from agentrl.outputs import naming
from agentrl.trajectory import Trajectory

if TYPE_CHECKING:
    import torch

    from agentrl.learn.algorithm import AlgorithmConfig
    from agentrl.tokens import Expander

__all__ = [
    "Rebuilt",
    "ReplaySettings",
    "RunConfig",
    "rebuild_batch",
    "resolve_settings",
    "row_numbers",
    "save_tensors",
]

#: The per-token numbers of a row that explain shows.
NUMBER_FIELDS = (
    "token_level_scores",
    "token_level_rewards",
    "values",
    "raw_advantages",
    "advantages",
    "returns",
)

StoredStats = dict[str, dict[str, np.ndarray]]


@dataclass
class ReplaySettings:
    """How the batch is rebuilt: the algorithm (``AlgorithmConfig``), whether the reward is the
    rubric's normalised score (the trainer's ``judge.normalize``), and the expander's ``max_len``."""

    algorithm: AlgorithmConfig
    normalize: bool = True
    max_len: int | None = None
    notes: list[str] = field(default_factory=list)


class _JudgeSettings(Protocol):
    @property
    def normalize(self) -> bool: ...


class _RolloutSettings(Protocol):
    @property
    def max_len(self) -> int: ...


class RunConfig(Protocol):
    """What a rebuild reads of a run's ``TrainConfig`` (``agentrl.train.run_config.load_run_config``
    reads a run directory's; ``TrainConfig()`` is every default). Replay does not import the
    trainer: it shares the update's code through ``agentrl.learn``."""

    @property
    def algorithm(self) -> AlgorithmConfig: ...
    @property
    def judge(self) -> _JudgeSettings: ...
    @property
    def rollout(self) -> _RolloutSettings: ...


def resolve_settings(
    run_config: RunConfig,
    *,
    algorithm: str | None = None,
    gamma: float | None = None,
    lam: float | None = None,
    normalize: bool | None = None,
    max_len: int | None = None,
) -> ReplaySettings:
    """The settings of a training run's config, overridden by the arguments that are not None. A KL
    penalty in the reward is not replayed (there is no reference model to give ``ref_logprobs``);
    the returned ``notes`` say so."""
    from pydantic import ValidationError

    from agentrl.learn.algorithm import AlgorithmConfig

    algo = run_config.algorithm.model_dump()
    for key, value in (("name", algorithm), ("gamma", gamma), ("lam", lam)):
        if value is not None:
            algo[key] = value
    notes = []
    if algo.get("kl_in_reward"):
        notes.append(
            "the run subtracted β·KL from the rewards; the rebuilt rewards leave it out (no reference model)"
        )
        algo["kl_in_reward"] = False
    try:
        a = AlgorithmConfig.model_validate(algo)
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"algorithm.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    return ReplaySettings(
        algorithm=a,
        normalize=run_config.judge.normalize if normalize is None else normalize,
        max_len=run_config.rollout.max_len if max_len is None else max_len,
        notes=notes,
    )


@dataclass
class Rebuilt:
    """A rebuilt batch: ``batch`` ([B, T] tensors named as in training, plus ``trajectory_index``
    [B], each row's index in the input list), the ``kept`` trajectories in row order, the drop
    counts of ``build_batch``, and where the values came from (``stored``, ``critic`` or ``zero``)."""

    batch: dict[str, torch.Tensor]
    kept: list[Trajectory]
    index: list[int]
    stats: dict[str, float]
    values_from: str


def _stored_values(rows: list[str], mask: torch.Tensor, stored: StoredStats) -> torch.Tensor | None:
    """[B, T] values from a run's stored numbers (by row id: a trajectory's, or ``ID#k`` for its
    context segment k), or None unless every kept row has them at exactly the rebuilt policy
    positions."""
    import torch

    values = torch.zeros(mask.shape, dtype=torch.float32)
    for i, rid in enumerate(rows):
        entry = stored.get(rid)
        if entry is None or "values" not in entry:
            return None
        pos = np.flatnonzero(mask[i].numpy())
        if not np.array_equal(pos, entry["positions"]):
            raise ConfigError(
                f"trajectory {rid!r}: the run's stored policy positions differ from the rebuilt row "
                "(another tokenizer or max_len than the run's?)"
            )
        values[i, torch.from_numpy(pos)] = torch.from_numpy(entry["values"].astype(np.float32))
    return values


def rebuild_batch(
    trajs: list[Trajectory],
    expander: Expander,
    settings: ReplaySettings,
    *,
    stored: StoredStats | None = None,
    critic: Any = None,
    pad_id: int = 0,
) -> Rebuilt:
    """Rebuild the update's tensors for ``trajs`` (one training step's trajectories, in file order).

    PPO values: the ``critic`` module's V(s_t) if given, else ``stored`` values when every kept row
    has them, else zero. GRPO/RLOO group rows by ``task_id``, as the trainer does. Returns a
    ``Rebuilt`` whose ``batch`` holds ``input_ids``, ``attention_mask``, ``position_ids``,
    ``loss_mask``, ``turn_ids``, ``old_logprobs``, ``known_logprobs``, ``token_level_scores``,
    ``token_level_rewards``, ``advantages``, ``returns`` ([B, T]), ``values`` ([B, T], PPO),
    ``raw_advantages`` ([B, T], PPO with whitening), ``prompt_len`` and ``trajectory_index`` ([B]).
    Raises ``ConfigError`` when no trajectory is trainable.
    """
    import torch

    from agentrl.learn.advantages import compute_advantages
    from agentrl.learn.batch import build_batch, row_ids
    from agentrl.learn.forward import chunked_forward, forward_values

    cfg = settings.algorithm
    cpu = torch.device("cpu")
    keep, batch, stats = build_batch(trajs, expander, normalize=settings.normalize, pad_id=pad_id, device=cpu)
    if not keep:
        raise ConfigError(
            f"none of the {len(trajs)} trajectories is trainable "
            f"({int(stats['train/dropped_judge_error'])} unscored or judge errors, "
            f"{int(stats['train/dropped_untrainable'])} without a policy token)"
        )
    ids = {id(t): i for i, t in enumerate(trajs)}
    index = [ids[id(t)] for t in keep]
    values_from = "zero"
    if cfg.needs_critic:
        values = None
        if critic is not None:
            with torch.no_grad():
                values = chunked_forward(
                    lambda b: forward_values(critic, b, pack=cfg.pack_sequences),
                    batch,
                    cfg.micro_batch_tokens,
                    cfg.pack_sequences,
                )
            values_from = "critic"
        elif stored is not None:
            values = _stored_values(row_ids(keep, batch), batch["loss_mask"], stored)
            values_from = "stored" if values is not None else "zero"
        batch["values"] = values if values is not None else torch.zeros_like(batch["old_logprobs"])
    compute_advantages(batch, cfg, [t.task_id for t in keep])
    batch["trajectory_index"] = torch.tensor(index, dtype=torch.int64)
    return Rebuilt(batch=batch, kept=keep, index=index, stats=stats, values_from=values_from)


def save_tensors(batch: dict[str, torch.Tensor], path: str | Path) -> str:
    """``torch.save`` the batch (keys sorted, contiguous CPU tensors) to ``path`` atomically; the
    bytes depend only on the tensors, not on the file name or the time. Returns their sha256."""
    import torch

    data = {k: batch[k].detach().cpu().contiguous() for k in sorted(batch)}
    buf = io.BytesIO()  # a buffer: torch.save names the archive after a file, not after a buffer
    torch.save(data, buf)
    raw = buf.getvalue()
    with naming(path):  # a full disk names the file, not an unnamed errno
        write_atomic(path, raw)
    return hashlib.sha256(raw).hexdigest()


def row_numbers(
    rebuilt: Rebuilt, row: int, length: int, stored: dict[str, np.ndarray] | None = None
) -> tuple[dict[str, np.ndarray], float | None]:
    """The [length] float64 arrays of ``NUMBER_FIELDS`` for batch row ``row``; where ``stored`` (one
    trajectory's entry of a run's token stats) has a field, its values replace the rebuilt ones at
    the stored positions. Also returns the largest |stored − rebuilt| advantage (None without
    stored advantages), a check that the replay reproduces the run."""
    b = rebuilt.batch
    out = {k: b[k][row, :length].double().numpy().copy() for k in NUMBER_FIELDS if k in b}
    if stored is None:
        return out, None
    pos = stored["positions"]
    if not np.array_equal(pos, np.flatnonzero(b["loss_mask"][row, :length].numpy())):
        raise ConfigError(
            f"trajectory {rebuilt.kept[row].id!r}: the run's stored policy positions differ from the "
            "rebuilt row (another tokenizer or max_len than the run's?)"
        )
    gap = None
    for k in NUMBER_FIELDS:
        v = stored.get(k)
        if v is None or np.isnan(v).all():
            continue
        arr = out.get(k, np.zeros(length)).copy()
        if k == "advantages":
            gap = float(np.max(np.abs(arr[pos] - v), initial=0.0))
        arr[pos] = v.astype(np.float64)
        out[k] = arr
    return out, gap
