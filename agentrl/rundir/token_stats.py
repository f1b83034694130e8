"""The per-token numbers of one step's update, ``tokens/step_NNNNN.npz``: written by the trainer
(``write_token_stats``), read back by ``agentrl explain --run`` and ``agentrl report``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from agentrl.rundir.atomic import write_atomic


def write_token_stats(path: Path | str, stats: dict[str, dict[str, np.ndarray]]) -> Path:
    """Write per-token numbers atomically to one ``.npz``: per trajectory id, ``positions`` (int64
    [n], its policy tokens' indices in the expander's row) and float32 [n] arrays (log-probs,
    values, scores, rewards, advantages, returns). The rows are concatenated, with an ``offsets``
    array and the ids as JSON; a field absent from some row reads back as NaN there."""
    path = Path(path)
    ids = list(stats)
    fields = sorted({f for e in stats.values() for f in e if f != "positions"})
    lengths = [len(stats[t]["positions"]) for t in ids]
    arrays: dict[str, np.ndarray] = {
        "ids": np.frombuffer(json.dumps(ids).encode(), dtype=np.uint8),
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "positions": np.concatenate([stats[t]["positions"] for t in ids] or [np.zeros(0, np.int64)]),
    }
    for f in fields:
        arrays[f] = np.concatenate(
            [stats[t].get(f, np.full(n, np.nan, np.float32)) for t, n in zip(ids, lengths, strict=True)]
            or [np.zeros(0, np.float32)]
        ).astype(np.float32)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    write_atomic(path, buf.getvalue())
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
