"""The training row of a stored trajectory, token by token, with the update's numbers on it.

The row is rebuilt by re-expanding the trajectory with the run's tokenizer (``Expander.expand``,
the same TITO expansion the trainer used), and the numbers come from ``tokens/step_NNNNN.npz``
(``read_token_stats``): per trajectory, the positions of its loss-masked tokens in that row and the
advantages, returns, values, log-probabilities and rewards at them. Expansion without ``max_len``
gives the same row as the trainer's up to its cut, so stored positions index it directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.errors import AgentRLError
from agentrl.rundir import RunDir, read_token_stats
from agentrl.tokens.segments import expand_segments, segment_row_id
from agentrl.trajectory import Trajectory
from agentrl.trajectory.context import segments

__all__ = ["TokenRow", "TokenSource", "decode_tokens", "token_row"]

#: Tooltip labels of the stored per-token arrays, in the order shown.
FIELD_LABELS = {
    "advantages": "A",
    "raw_advantages": "A raw",
    "returns": "return",
    "values": "V",
    "token_level_scores": "score",
    "token_level_rewards": "reward",
    "old_logprobs": "logp",
    "ref_logprobs": "ref logp",
}


@dataclass
class TokenRow:
    """One trajectory's expanded row: ``ids``, ``texts`` (one display string per token) and
    ``loss_mask`` of shape [L], ``segments`` from the expander, and ``values``: per stored field a
    float32 [L] array, NaN off the stored positions (empty when the step stored no numbers).
    ``note`` says why there is no colouring, when there is none."""

    ids: np.ndarray
    texts: list[str]
    loss_mask: np.ndarray
    segments: list[Any]
    values: dict[str, np.ndarray] = field(default_factory=dict)
    note: str | None = None

    @property
    def coloured(self) -> bool:
        return "advantages" in self.values


def decode_tokens(tokenizer: Any, ids: list[int]) -> list[str]:
    """One display string per token id ([L] → L strings). A token that ends inside a multi-byte
    character decodes to U+FFFD on its own; it is joined with the next tokens (up to 4) until the
    text is whole, the joined text shown on the first token and the others left empty."""
    texts = tokenizer.batch_decode([[i] for i in ids], clean_up_tokenization_spaces=False)
    i = 0
    while i < len(texts):
        if "\ufffd" in texts[i]:
            for j in range(i + 2, min(i + 5, len(ids)) + 1):
                whole = tokenizer.decode(ids[i:j], clean_up_tokenization_spaces=False)
                if "\ufffd" not in whole:
                    texts[i:j] = [whole] + [""] * (j - i - 1)
                    i = j - 1
                    break
        i += 1
    return texts


class TokenSource:
    """Builds ``TokenRow`` s for a run: the run's tokenizer and expander (built once, lazily) and the
    token statistics of each step (read once per step). ``tokenizer`` overrides ``RUN_DIR/tokenizer``."""

    def __init__(self, run_dir: Path, token_files: dict[int, Path], tokenizer: str | None = None) -> None:
        self.run_dir = run_dir
        self.token_files = token_files
        self.tokenizer_path = Path(tokenizer) if tokenizer else RunDir(run_dir).tokenizer_dir
        self._expander: Any = None
        self.problem: str | None = None  # why no row can be built at all
        self._stats: dict[int, dict[str, dict[str, np.ndarray]]] = {}
        if not self.tokenizer_path.exists():
            self.problem = f"no tokenizer at {self.tokenizer_path} (pass --tokenizer)"

    def _get_expander(self) -> Any:
        if self._expander is None and self.problem is None:
            try:
                from transformers import AutoTokenizer

                from agentrl.tokens import run_expander

                tok = AutoTokenizer.from_pretrained(str(self.tokenizer_path))
                self._expander = run_expander(tok, RunDir(self.run_dir).sampling_file)
            except Exception as e:  # any tokenizer or template failure only costs the colouring
                self.problem = f"cannot load the tokenizer at {self.tokenizer_path}: {e}"
        return self._expander

    def _step_stats(self, step: int) -> dict[str, dict[str, np.ndarray]] | None:
        if step not in self.token_files:
            return None
        if step not in self._stats:
            self._stats[step] = read_token_stats(self.token_files[step])
        return self._stats[step]

    def row(self, traj: Trajectory, step: int) -> tuple[TokenRow | None, str | None]:
        """The row of ``traj`` (stored at ``step``) and None, or None and the reason there is no
        row (no tokenizer, or the trajectory cannot be expanded)."""
        expander = self._get_expander()
        if expander is None:
            return None, self.problem
        stats = self._step_stats(step)
        try:
            parts = segments(traj)
            if len(parts) == 1:
                entry = None if stats is None else stats.get(traj.id)
                return token_row(expander, traj, entry, missing=self._why_missing(stats)), None
            # a rewritten context: the last segment's row (the answer, and the context it was written in)
            rows = expand_segments(expander, traj)
            shown = max((i for i, r in enumerate(rows) if r.loss_mask.any()), default=len(rows) - 1)
            last = parts[shown]  # the last segment that sampled (and trained) anything
            entry = None if stats is None else stats.get(segment_row_id(traj.id, last.index))
            out = token_row(expander, traj, entry, missing=self._why_missing(stats), row=rows[shown])
            shown_as = (
                "restarted from the task with the policy's notes"
                if last.context.head is not None
                else f"{len(last.stubbed)} earlier tool results shown as stubs"
            )
            about = (
                f"context segment {last.index + 1} of {len(parts)} (from turn {last.first_turn + 1}; "
                f"{shown_as}, the earlier turns are its prompt; each segment trains as its own row)"
            )
            out.note = about if out.note is None else f"{about}. {out.note}"
            return out, None
        except (AgentRLError, ValueError) as e:  # a template that cannot render this trajectory
            return None, f"the trajectory cannot be expanded with this tokenizer: {e}"

    def _why_missing(self, stats: dict[str, Any] | None) -> str:
        if not self.token_files:
            return "this run stored no per-token numbers (tokens/ is missing: log_token_stats was off)"
        if stats is None:
            return "no per-token numbers were stored for this step"
        return "not trained in this step (judge error or no policy token), so it has no per-token numbers"


def token_row(
    expander: Any,
    traj: Trajectory,
    entry: dict[str, np.ndarray] | None,
    missing: str = "",
    row: Any = None,
) -> TokenRow:
    """Expand ``traj`` (or take its ``row``: one context segment's) and place ``entry`` (``positions``
    int64 [n] and float32 [n] arrays, as from ``read_token_stats``) on it. When ``entry`` is None, or
    its positions are not loss-masked tokens of the row (another tokenizer or template), the row has
    no values and a ``note``."""
    row = expander.expand(traj) if row is None else row
    ids = row.input_ids.tolist()
    out = TokenRow(
        ids=row.input_ids,
        texts=decode_tokens(expander.tokenizer, ids),
        loss_mask=row.loss_mask,
        segments=list(row.segments),
    )
    if entry is None:
        out.note = missing or "no per-token numbers for this trajectory"
        return out
    pos = np.asarray(entry["positions"], dtype=np.int64)
    if pos.size and (pos.min() < 0 or pos.max() >= len(ids) or not row.loss_mask[pos].all()):
        out.note = (
            "the stored token positions do not match this trajectory's row (was it trained with "
            "another tokenizer or chat template?); shown without numbers"
        )
        return out
    for name in FIELD_LABELS:
        if name in entry and len(entry[name]) == pos.size:
            full = np.full(len(ids), np.nan, dtype=np.float32)
            full[pos] = entry[name]
            out.values[name] = full
    if not out.coloured:
        out.note = "the stored numbers have no advantages"
    return out
