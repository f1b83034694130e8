"""The token expander (layer 1): trajectories → exact training tokens, masks and rewards.

``Expander(tokenizer).expand(trajectory)`` gives a ``TokenizedTrajectory`` of aligned ``[L]`` arrays;
``collate`` and ``pack`` batch rows into torch tensors; ``token_logprobs`` aligns a model's logits
with them. See ``docs/tokens.md``. Imports only ``agentrl.trajectory``, ``agentrl.algos`` (log-probabilities) and ``agentrl.errors``;
torch is imported lazily by the functions that return tensors.
"""

from agentrl.errors import ForkError, TemplateError, TokenCheckError
from agentrl.tokens.arrays import Segment, TokenizedTrajectory
from agentrl.tokens.batch import block_causal_mask, collate, pack
from agentrl.tokens.check import SegmentDiff
from agentrl.tokens.cut import DEFAULT_MAX_LEN
from agentrl.tokens.expander import CheckMode, Expander
from agentrl.tokens.logprobs import token_logprobs
from agentrl.tokens.record import TokenTrajectory, token_trajectory
from agentrl.tokens.sampled import sampled_message
from agentrl.tokens.segments import expand_segments, sampled_segments, segment_row_id
from agentrl.tokens.selftest import TemplateReport
from agentrl.tokens.spec import SamplingSpec, read_sampling_spec, run_expander, sampling_spec
from agentrl.tokens.stops import end_of_turn_ids, generation_eos_ids, turn_stop_ids
from agentrl.tokens.template import ChatTemplate

__all__ = [
    "DEFAULT_MAX_LEN",
    "ChatTemplate",
    "CheckMode",
    "Expander",
    "ForkError",
    "SamplingSpec",
    "Segment",
    "SegmentDiff",
    "TemplateError",
    "TemplateReport",
    "TokenCheckError",
    "TokenTrajectory",
    "TokenizedTrajectory",
    "block_causal_mask",
    "collate",
    "end_of_turn_ids",
    "expand_segments",
    "generation_eos_ids",
    "pack",
    "read_sampling_spec",
    "run_expander",
    "sampled_message",
    "sampled_segments",
    "sampling_spec",
    "segment_row_id",
    "token_logprobs",
    "token_trajectory",
    "turn_stop_ids",
]
