"""The per-token numbers of every update, kept so that a run can be explained afterwards.

Each step writes ``RUN_DIR/tokens/step_NNNNN.npz``: for every trained trajectory (by id, as in
``trajectories/step_NNNNN.jsonl``) the positions of its policy tokens in the expander's row and, at
those positions, the log-probabilities, values, scores, rewards, advantages and returns the update
used. Only policy tokens are stored: everything else is either masked out of the loss or can be
rebuilt exactly by re-expanding the stored trajectory. numpy only, so readers need no torch.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TOKEN_FIELDS", "collect_token_stats", "read_token_stats", "write_token_stats"]

#: Per-token arrays stored when the batch has them (``raw_advantages``: before whitening).
TOKEN_FIELDS = (
    "old_logprobs",
    "ref_logprobs",
    "values",
    "token_level_scores",
    "token_level_rewards",
    "raw_advantages",
    "advantages",
    "returns",
)


def collect_token_stats(traj_ids: list[str], batch: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """Per trajectory id (row ``i`` of ``batch`` is ``traj_ids[i]``): ``positions`` (int64 [n], the
    row's loss-masked indices) and float32 [n] arrays of the ``TOKEN_FIELDS`` present in the batch
    (each a [B, T] tensor)."""
    mask = batch["loss_mask"].detach().cpu().numpy().astype(bool)
    present = [f for f in TOKEN_FIELDS if f in batch]
    arrays = {f: batch[f].detach().float().cpu().numpy() for f in present}
    out: dict[str, dict[str, np.ndarray]] = {}
    for i, tid in enumerate(traj_ids):
        pos = np.flatnonzero(mask[i])
        entry = {"positions": pos.astype(np.int64)}
        for f in present:
            entry[f] = arrays[f][i, pos].astype(np.float32)
        out[tid] = entry
    return out


def write_token_stats(path: Path | str, stats: dict[str, dict[str, np.ndarray]]) -> Path:
    """Write ``stats`` (as from ``collect_token_stats``, possibly merged over ranks) atomically to one
    ``.npz``: the rows are concatenated, with an ``offsets`` array and the ids as JSON."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = list(stats)
    fields = sorted({f for e in stats.values() for f in e if f != "positions"})
    lengths = [len(stats[t]["positions"]) for t in ids]
    arrays: dict[str, np.ndarray] = {
        "ids": np.frombuffer(json.dumps(ids).encode(), dtype=np.uint8),
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "positions": np.concatenate([stats[t]["positions"] for t in ids] or [np.zeros(0, np.int64)]),
    }
    for f in fields:
        # A field absent from some row (rows merged from runs with different settings) reads as NaN.
        arrays[f] = np.concatenate(
            [stats[t].get(f, np.full(n, np.nan, np.float32)) for t, n in zip(ids, lengths, strict=True)]
            or [np.zeros(0, np.float32)]
        ).astype(np.float32)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)
    return path


def read_token_stats(path: Path | str) -> dict[str, dict[str, np.ndarray]]:
    """The inverse of ``write_token_stats``: per trajectory id, ``positions`` (int64 [n]) and the
    stored float32 [n] arrays."""
    with np.load(Path(path)) as z:
        ids = json.loads(z["ids"].tobytes().decode())
        offsets = z["offsets"]
        data = {k: z[k] for k in z.files if k not in ("ids", "offsets")}
    out: dict[str, dict[str, np.ndarray]] = {}
    for i, tid in enumerate(ids):
        a, b = int(offsets[i]), int(offsets[i + 1])
        out[tid] = {k: v[a:b] for k, v in data.items()}
    return out
