"""``TokenizedTrajectory``: one trajectory as aligned per-token arrays, ready to batch.

Every array has length L and index t describes token t (docs/tokens.md, "The row"). Internal
data, so a dataclass of numpy arrays rather than a pydantic model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

__all__ = ["Segment", "SegmentKind", "TokenizedTrajectory"]

SegmentKind = Literal["prompt", "sampled", "retokenized", "template", "observation"]


@dataclass(frozen=True)
class Segment:
    """A run of tokens ``[start, end)`` with one origin.

    ``prompt``: the messages before the first assistant turn, with the first generation prompt.
    ``sampled``: an assistant turn's ids as sampled. ``retokenized``: an assistant turn rendered
    and tokenized because it carried no ids. ``template``: what the template writes after a turn
    when nothing follows (an end-of-turn tail). ``observation``: the tail of a turn, the following
    tool/user messages with their wrappers, and the next generation prompt.
    ``message_index`` is the first message the segment covers.
    """

    kind: SegmentKind
    message_index: int
    start: int
    end: int
    turn: int = -1


@dataclass
class TokenizedTrajectory:
    """Aligned token arrays for one trajectory (all of shape ``[L]``).

    - ``input_ids`` (int64): the token ids, sampled ones exactly as sampled.
    - ``attention_mask`` (int64): 1 everywhere (padding is added by ``collate``).
    - ``position_ids`` (int64): ``0..L-1``.
    - ``loss_mask`` (int64): 1 exactly on tokens the policy sampled, its stop token included.
    - ``old_logprobs`` (float32): the sampling policy's log p(token t); 0.0 where masked or unknown.
    - ``token_level_scores`` (float32): the judge reward on the last ``loss_mask = 1`` token, plus
      optional per-turn rewards on each turn's last sampled token; 0 elsewhere.
    - ``turn_ids`` (int64): index of the assistant turn that generated token t, or -1.

    ``prompt_len`` counts the tokens before the first generated one. Flags:
    ``retokenized_turns`` (turns rebuilt from text; their logprobs are unknown),
    ``unknown_logprob_turns`` (every turn whose ``old_logprobs`` are 0.0 placeholders),
    ``truncated`` (cut at ``max_len`` or by a turn that hit the generation limit),
    ``forks`` (message indices where the template would rewrite earlier turns, so a chat-API rollout
    showed the model a different history than this appended sequence), ``scored`` (a judge reward
    was placed). ``segments`` records where each part came from (for checks and explain views).
    """

    trajectory_id: str
    input_ids: np.ndarray
    attention_mask: np.ndarray
    position_ids: np.ndarray
    loss_mask: np.ndarray
    old_logprobs: np.ndarray
    token_level_scores: np.ndarray
    turn_ids: np.ndarray
    prompt_len: int
    retokenized_turns: list[int] = field(default_factory=list)
    unknown_logprob_turns: list[int] = field(default_factory=list)
    truncated: bool = False
    forks: list[int] = field(default_factory=list)
    scored: bool = False
    segments: list[Segment] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def known_logprob_mask(self) -> np.ndarray:
        """``[L]`` int64: 1 where ``loss_mask`` is 1 and the sampling logprob is known."""
        unknown = np.isin(self.turn_ids, np.asarray(self.unknown_logprob_turns, dtype=np.int64))
        return (self.loss_mask.astype(bool) & ~unknown).astype(np.int64)

    def check_aligned(self) -> None:
        """Raise ``AssertionError`` unless every array has the same length L (a cheap invariant)."""
        n = len(self)
        for name in (
            "attention_mask",
            "position_ids",
            "loss_mask",
            "old_logprobs",
            "token_level_scores",
            "turn_ids",
        ):
            a = getattr(self, name)
            assert a.shape == (n,), f"{name} has shape {a.shape}, expected ({n},)"
