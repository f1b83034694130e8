"""The per-token numbers of every update, kept so that a run can be explained afterwards.

Each step writes ``RUN_DIR/tokens/step_NNNNN.npz`` (``agentrl.rundir.write_token_stats``): for
every trained trajectory (by id, as in ``trajectories/step_NNNNN.jsonl``) the positions of its policy tokens in the expander's row and, at
those positions, the log-probabilities, values, scores, rewards, advantages and returns the update
used. Only policy tokens are stored: everything else is either masked out of the loss or can be
rebuilt exactly by re-expanding the stored trajectory. numpy only, so readers need no torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["TOKEN_FIELDS", "collect_token_stats"]

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
