"""Rollout correction: truncated importance sampling and rejection between the sampler and the trainer.

The engine that samples (vLLM in bf16, or a policy some updates old) and the trainer that recomputes
log-probs disagree. With log r_t = log π_trainer(t) − log π_rollout(t) per policy token, this module
gives, with verl's option names and semantics (``rollout_corr_helper``):

- **IS weights** (``rollout_is``): ``token``: w_t = exp(log r_t); ``sequence``: w = exp(Σ_t log r_t)
  on every token of the sequence; log-ratios are clamped to ±20 before ``exp``; the weights are
  truncated at ``rollout_is_threshold`` (TIS) and optionally rescaled to mean 1 over the batch. They
  multiply the per-token policy loss and carry no gradient.
- **rejection** (``rollout_rs``): per-token divergences k1 = −log r, k2 = ½(log r)², k3 = r − 1 − log r,
  taken per token (``token_k*``) or per sequence as a sum, mean or max (``seq_sum_k*``,
  ``seq_mean_k*``, ``seq_max_k*``); a token (or every token of a sequence) whose statistic falls
  outside its threshold leaves the loss. k1 is bounded on both sides by log(lower), log(upper);
  k2 and k3 by an upper bound. Several options are ANDed.
- **diagnostics**: IS weight mean/max/min/std, effective sample size, the rejected fractions, and the
  rollout-vs-trainer KL (k1 and k3), perplexities and χ².

Tensors are [B, T] with ``mask`` 1 on the policy tokens that have both log-probs.
"""

from __future__ import annotations

import math

import torch

from agentrl.algos.reduce import LOCAL, Reduce
from agentrl.algos.stats import masked_mean

__all__ = [
    "RS_OPTIONS",
    "SAFETY_BOUND",
    "offpolicy_metrics",
    "parse_rs_options",
    "rejection_mask",
    "rollout_correction",
    "rollout_is_weights",
]

SAFETY_BOUND = 20.0  # log-ratios are clamped to ±20 before exp (as verl)

RS_OPTIONS = (
    "token_k1", "token_k2", "token_k3",
    "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3",
    "seq_max_k2", "seq_max_k3",
)  # fmt: skip


def parse_rs_options(rollout_rs: str, threshold: str | float | None) -> list[tuple[str, float | None, float]]:
    """``rollout_rs`` ("token_k1,seq_mean_k3") and its thresholds → [(option, lower, upper)].

    One threshold is shared by every option, or there is one per option (comma-separated). A k1
    option takes ``"lower_upper"`` ratio bounds, or one upper bound u with lower = 1/u; k2/k3 options
    take one positive upper bound (lower is None). Raises ``ValueError`` naming the bad part.
    """
    options = list(dict.fromkeys(o.strip() for o in rollout_rs.split(",") if o.strip()))
    if not options:
        raise ValueError("rollout_rs names no option")
    for o in options:
        if o not in RS_OPTIONS:
            raise ValueError(f"rollout_rs: unknown option {o!r}; expected one of {', '.join(RS_OPTIONS)}")
    if threshold is None:
        raise ValueError("rollout_rs needs rollout_rs_threshold")
    specs = [p.strip() for p in str(threshold).split(",") if p.strip()]
    if len(specs) == 1:
        specs = specs * len(options)
    if len(specs) != len(options):
        raise ValueError(
            f"rollout_rs_threshold: give one threshold or one per option ({len(options)}), got {len(specs)}"
        )
    out: list[tuple[str, float | None, float]] = []
    for o, spec in zip(options, specs, strict=True):
        try:
            if o.endswith("k1"):
                lo, _, hi = spec.partition("_") if "_" in spec else ("", "", spec)
                upper = float(hi)
                lower = float(lo) if lo else 1.0 / upper
            elif "_" in spec:
                raise ValueError
            else:
                lower, upper = None, float(spec)
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"rollout_rs_threshold: {spec!r} is not a valid threshold for {o}") from None
        if upper <= 0 or (lower is not None and lower <= 0):
            raise ValueError(f"rollout_rs_threshold: the bounds of {o} must be positive, got {spec!r}")
        out.append((o, lower, upper))
    return out


def _seq_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum(-1)


def _seq_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _seq_sum(x, mask) / mask.sum(-1).clamp_min(1)


def _safe(log_w: float) -> float:
    """A log-weight clamped to ±SAFETY_BOUND, as the weights themselves are."""
    return min(max(log_w, -SAFETY_BOUND), SAFETY_BOUND)


def _ess_and_std(c: torch.Tensor) -> tuple[float, float]:
    """The normalised effective sample size 1 / mean((c / mean c)²) and the population std of the
    clamped weights ``c`` [N] (all > 0), in float64 and in the form 1 / (1 + var / mean²): the ESS
    is at most 1 by Cauchy–Schwarz, and this form keeps it there in floating point too (1 + a
    non-negative number is never below 1), so equal weights give exactly 1.0 whatever the kernels'
    summation order (the float32 ratio form gave 1.0000001 on AVX2). Empty ``c`` gives (1.0, 0.0)."""
    if c.numel() == 0:
        return 1.0, 0.0
    c = c.detach().to(torch.float64)
    mean = c.mean()
    var = (c - mean).square().mean()  # two passes: no E[c²] − E[c]² cancellation
    return (1.0 / (1.0 + var / mean.square())).item(), var.sqrt().item()


def rollout_is_weights(
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    level: str,
    threshold: float,
    batch_normalize: bool = False,
    reduce: Reduce = LOCAL,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated IS weights [B, T] (0 off ``mask``, detached) and their metrics, taken before
    truncation: ``rollout_is_mean``/``max``/``min``/``std``, ``rollout_is_eff_sample_size``
    (1 / mean((w / mean w)²) over tokens, weights clamped to [1/threshold, threshold]) and the
    fractions above ``threshold`` and below 1/threshold (of tokens, or of sequences at sequence level)."""
    m = mask.to(log_ratio.dtype)
    on = mask.bool()
    rows = on.any(-1)
    if level == "token":
        w = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
        stat_log = log_ratio[on]
    elif level == "sequence":
        seq = _seq_sum(log_ratio, m)
        w = torch.exp(seq.clamp(-SAFETY_BOUND, SAFETY_BOUND))[:, None].expand_as(log_ratio)
        stat_log = seq[rows]
    else:
        raise ValueError(f"rollout_is must be 'token' or 'sequence', got {level!r}")
    w = w * m
    lo = 1.0 / threshold
    clamped = w.clamp(lo, threshold)
    ess, std = _ess_and_std(clamped[on])
    metrics = (
        {}
        if not rows.any()
        else {
            "rollout_is_mean": masked_mean(w, m).item(),
            # both ends clamped to ±SAFETY_BOUND: a sequence sum above 709 overflowed math.exp
            "rollout_is_max": math.exp(_safe(stat_log.max().item())),
            "rollout_is_min": math.exp(_safe(stat_log.min().item())),
            "rollout_is_std": std,
            "rollout_is_eff_sample_size": ess,
            "rollout_is_ratio_fraction_high": (stat_log > math.log(threshold)).double().mean().item(),
            "rollout_is_ratio_fraction_low": (stat_log < math.log(lo)).double().mean().item(),
        }
    )
    w = w.clamp(max=threshold).detach()
    if batch_normalize:
        if level == "token":
            norm = masked_mean(w, m, reduce=reduce)
        else:
            per_seq = _seq_mean(w, m)
            total = reduce.sum(torch.stack([per_seq[rows].sum(), rows.sum().to(per_seq.dtype)]))
            norm = total[0] / total[1].clamp_min(1)
        if norm > 1e-8:
            w = w / norm
        metrics["rollout_is_batch_norm_factor"] = float(norm) if norm > 1e-8 else 1.0
    return w, metrics


def rejection_mask(
    log_ratio: torch.Tensor, mask: torch.Tensor, options: list[tuple[str, float | None, float]]
) -> tuple[torch.Tensor, dict[str, float]]:
    """The keep mask [B, T] (1 = kept, 0 = rejected; 1 off ``mask``) of every option of
    ``parse_rs_options`` ANDed, and the fractions of tokens and sequences each rejected."""
    m = mask.to(log_ratio.dtype)
    on = mask.bool()
    rows = on.any(-1)
    lr = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    ks = {"k1": -lr, "k2": 0.5 * lr**2, "k3": torch.exp(lr) - 1.0 - lr}
    keep = torch.ones_like(on)
    metrics: dict[str, float] = {}
    for option, lower, upper in options:
        where, k = option.rsplit("_", 1)
        x = ks[k]
        if where == "token":
            stat = x
        elif where == "seq_sum":
            stat = _seq_sum(x, m)[:, None]
        elif where == "seq_mean":
            stat = _seq_mean(x, m)[:, None]
        else:  # seq_max
            stat = x.masked_fill(~on, -torch.inf).max(-1).values.clamp_min(0)[:, None]
        if k == "k1":
            assert lower is not None
            ok = (stat >= math.log(lower)) & (stat <= math.log(upper))
        else:
            ok = stat <= upper
        ok = ok.expand_as(on) | ~on
        keep &= ok
        metrics[f"rollout_rs_{option}_masked_fraction"] = masked_mean((~ok).to(m.dtype), m).item()
        metrics[f"rollout_rs_{option}_seq_masked_fraction"] = (~ok).any(-1)[rows].double().mean().item()
    metrics["rollout_rs_masked_fraction"] = masked_mean((~keep).to(m.dtype), m).item()
    metrics["rollout_rs_seq_masked_fraction"] = (~keep).any(-1)[rows].double().mean().item()
    return keep.to(log_ratio.dtype), metrics


def offpolicy_metrics(
    old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """How far the sampler is from the trainer: ``kl`` (k1 of KL(π_rollout ‖ π_trainer), mean of
    log π_rollout − log π_trainer), ``k3_kl``, ``training_ppl`` and ``rollout_ppl`` (batch means of
    the sequences' exp(−mean log-prob)), ``log_ppl_diff`` (mean of the sequences' log-PPL gap,
    trainer − rollout), ``chi2_token`` (E[r²] − 1 over tokens) and ``chi2_seq`` (E[(Π r)²] − 1)."""
    m = mask.to(old_logprobs.dtype)
    rows = mask.bool().any(-1)
    lr = old_logprobs - rollout_logprobs
    lr_safe = lr.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    mean_train = _seq_mean(old_logprobs, m)[rows]
    mean_roll = _seq_mean(rollout_logprobs, m)[rows]
    seq = _seq_sum(lr, m)[rows].clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {
        "kl": masked_mean(-lr, m).item(),
        "k3_kl": masked_mean(torch.exp(lr) - lr - 1, m).item(),
        "training_ppl": torch.exp(-mean_train).mean().item(),
        "rollout_ppl": torch.exp(-mean_roll).mean().item(),
        "log_ppl_diff": (mean_roll - mean_train).mean().item(),
        "chi2_token": (masked_mean(torch.exp(lr_safe).square(), m) - 1.0).item(),
        "chi2_seq": (torch.exp(2.0 * seq).mean() - 1.0).item(),
    }


def rollout_correction(
    old_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    rollout_is: str | None = None,
    rollout_is_threshold: float = 2.0,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: str | float | None = None,
    reduce: Reduce = LOCAL,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """IS weights and keep mask for the policy loss, both [B, T] and 1 off ``mask`` (no weight, no
    rejection where a log-prob is missing), and ``rollout_corr/*`` metrics. ``old_logprobs`` are the
    trainer's, ``rollout_logprobs`` the sampler's, for the same tokens; ``mask`` [B, T] marks the
    policy tokens that have both."""
    on = mask.bool()
    ones = torch.ones_like(old_logprobs)
    # A rank with no such token still joins the batch normalisation's all-reduce.
    if not on.any() and not (rollout_is is not None and rollout_is_batch_normalize):
        return ones, ones.clone(), {}
    log_ratio = torch.where(on, old_logprobs - rollout_logprobs, torch.zeros_like(old_logprobs))
    weights, keep, metrics = ones, ones.clone(), {}
    if rollout_is is not None:
        w, is_metrics = rollout_is_weights(
            log_ratio, on, rollout_is, rollout_is_threshold, rollout_is_batch_normalize, reduce
        )
        weights = torch.where(on, w, ones)
        metrics.update(is_metrics)
    if rollout_rs is not None and on.any():
        keep, rs_metrics = rejection_mask(log_ratio, on, parse_rs_options(rollout_rs, rollout_rs_threshold))
        metrics.update(rs_metrics)
    if on.any():
        metrics.update(offpolicy_metrics(old_logprobs, rollout_logprobs, on))
    return weights, keep, {f"rollout_corr/{k}": v for k, v in metrics.items()}
