"""Explain the RL arithmetic of one response, token by token, from plain arrays.

Given the response tokens, the policy mask, the critic's values and either the token-level rewards
or the judge scores with a per-token KL and β, this recomputes everything the PPO update sees:
rewards (scores − β·KL on policy tokens), TD residuals δ, GAE advantages, returns and the whitened
advantages, and lays them out as a table or JSON. All arithmetic is float64 through ``agentrl.algos``.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentrl.errors import ConfigError

__all__ = ["ArraysInput", "Explanation", "explain_arrays", "format_json", "format_table", "load_arrays"]

LEGEND = (
    "value = V(s_t), the critic's estimate before token t of r_t + γ·r_t+1 + … (it includes r_t); "
    "reward = score − β·KL on policy tokens; δ = reward + γ·V(next policy token) − value; "
    "advantage = δ + γλ·advantage(next policy token), masked tokens skipped; "
    "return = advantage + value, with the advantage before whitening"
)


class ArraysInput(BaseModel):
    """The input file of ``agentrl explain --arrays``: one response, index t = response token t."""

    model_config = ConfigDict(extra="forbid")

    prompt: str | None = Field(None, description="the prompt, shown as a heading only")
    tokens: list[str] | None = Field(None, description="the response tokens as text, for display")
    response_mask: list[int] = Field(description="1 where the policy sampled the token, 0 elsewhere")
    values: list[float | None] | None = Field(
        None, description="critic values V(s_t); null allowed on masked tokens; omitted = all 0 (GRPO view)"
    )
    token_level_rewards: list[float] | None = None
    token_level_scores: list[float] | None = None
    kl: list[float] | None = Field(
        None, description="per-token KL(π‖π_ref) estimate, used with scores and beta"
    )
    beta: float | None = Field(None, description="KL coefficient β")
    gamma: float = 1.0
    lam: float = 0.95

    @model_validator(mode="after")
    def _check(self) -> ArraysInput:
        n = len(self.response_mask)
        if any(m not in (0, 1) for m in self.response_mask):
            raise ValueError("response_mask: every entry must be 0 or 1")
        if (self.token_level_rewards is None) == (self.token_level_scores is None):
            raise ValueError("give either token_level_rewards, or token_level_scores (with kl and beta)")
        if self.token_level_rewards is not None and (self.kl is not None or self.beta is not None):
            raise ValueError("kl and beta go with token_level_scores, not with token_level_rewards")
        if self.token_level_scores is not None and (self.kl is None) != (self.beta is None):
            raise ValueError("kl and beta must be given together")
        for name in ("tokens", "values", "token_level_rewards", "token_level_scores", "kl"):
            arr = getattr(self, name)
            if arr is not None and len(arr) != n:
                raise ValueError(f"{name} has {len(arr)} entries but response_mask has {n}")
        if self.values is not None:
            for t, (v, m) in enumerate(zip(self.values, self.response_mask, strict=True)):
                if v is None and m:
                    raise ValueError(
                        f"values[{t}] is null on a policy token (null is allowed on masked tokens only)"
                    )
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.lam <= 1.0:
            raise ValueError("gamma and lam must lie in [0, 1]")
        return self


class Explanation(BaseModel):
    """Every per-token quantity of the update, plus the whitening statistics."""

    tokens: list[str]
    response_mask: list[int]
    token_level_scores: list[float] | None
    kl: list[float] | None
    beta: float | None
    token_level_rewards: list[float]
    values: list[float]
    deltas: list[float]
    advantages: list[float]
    returns: list[float]
    advantages_whitened: list[float]
    whiten_mean: float
    whiten_var: float
    gamma: float
    lam: float
    prompt: str | None = None


def load_arrays(path: str | Path) -> ArraysInput:
    """Read and validate an arrays JSON file; errors name the file and the field."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON: {e}") from None
    try:
        return ArraysInput.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{path}: {loc}: {msg}") from None


def explain_arrays(inp: ArraysInput) -> Explanation:
    """Recompute rewards, δ, advantages, returns and whitened advantages for one response."""
    import torch

    from agentrl.algos import gae, masked_mean, masked_var, masked_whiten, td_residuals

    n = len(inp.response_mask)
    mask = torch.tensor([inp.response_mask], dtype=torch.float64)
    values = torch.tensor([[0.0 if v is None else v for v in (inp.values or [0.0] * n)]], dtype=torch.float64)
    if inp.token_level_rewards is not None:
        rewards = torch.tensor([inp.token_level_rewards], dtype=torch.float64)
    else:
        rewards = torch.tensor([inp.token_level_scores], dtype=torch.float64)
        if inp.kl is not None:
            rewards = rewards - inp.beta * torch.tensor([inp.kl], dtype=torch.float64) * mask
    deltas = td_residuals(rewards, values, mask, inp.gamma)
    adv, ret = gae(rewards, values, mask, inp.gamma, inp.lam)
    whitened = masked_whiten(adv, mask) * mask
    return Explanation(
        prompt=inp.prompt,
        tokens=inp.tokens or [f"<{t}>" for t in range(n)],
        response_mask=inp.response_mask,
        token_level_scores=inp.token_level_scores,
        kl=inp.kl,
        beta=inp.beta,
        token_level_rewards=rewards[0].tolist(),
        values=values[0].tolist(),
        deltas=deltas[0].tolist(),
        advantages=adv[0].tolist(),
        returns=ret[0].tolist(),
        advantages_whitened=whitened[0].tolist(),
        whiten_mean=masked_mean(adv, mask).item(),
        whiten_var=masked_var(adv, mask).item(),
        gamma=inp.gamma,
        lam=inp.lam,
    )


def _width(s: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def _pad(s: str, width: int, right: bool = False) -> str:
    fill = " " * max(0, width - _width(s))
    return fill + s if right else s + fill


def _show_token(tok: str) -> str:
    return json.dumps(tok, ensure_ascii=False)[1:-1]  # escapes newlines and tabs, keeps CJK readable


def format_table(ex: Explanation, decimals: int = 4) -> str:
    """The token table as text: one row per token, a legend line first, whitening statistics last."""
    has_scores = ex.token_level_scores is not None
    has_kl = ex.kl is not None
    cols = ["t", "token", "mask"]
    cols += ["score"] if has_scores else []
    cols += ["KL"] if has_kl else []
    cols += ["reward", "value", "δ", "advantage", "return", "whitened"]
    rows: list[list[str]] = []
    num = f"{{:.{decimals}f}}"
    for t, tok in enumerate(ex.tokens):
        on = ex.response_mask[t] == 1
        cells = [str(t), _show_token(tok), str(ex.response_mask[t])]
        if has_scores:
            cells.append(num.format(ex.token_level_scores[t]))
        if has_kl:
            cells.append(num.format(ex.kl[t]) if on else "–")
        if on:
            cells += [
                num.format(x)
                for x in (
                    ex.token_level_rewards[t],
                    ex.values[t],
                    ex.deltas[t],
                    ex.advantages[t],
                    ex.returns[t],
                    ex.advantages_whitened[t],
                )
            ]
        else:
            cells += ["–"] * 6  # observation / template token: skipped by GAE
        rows.append(cells)
    widths = [max(_width(c) for c in [h] + [r[i] for r in rows]) for i, h in enumerate(cols)]
    left = {"token"}

    def line(cells: list[str]) -> str:
        return "  ".join(_pad(c, w, right=h not in left) for c, w, h in zip(cells, widths, cols, strict=True))

    out = [f"legend: {LEGEND}"]
    if ex.prompt:
        out.append(f"prompt: {ex.prompt}")
    out.append(f"γ = {ex.gamma:g}, λ = {ex.lam:g}" + (f", β = {ex.beta:g}" if ex.beta is not None else ""))
    out.append(line(cols).rstrip())
    out.append("  ".join("-" * w for w in widths))
    out += [line(r).rstrip() for r in rows]
    n_policy = sum(ex.response_mask)
    out.append(
        f"whitened = (advantage − {ex.whiten_mean:.7f}) / sqrt({ex.whiten_var:.7f} + 1e-8): "
        f"batch mean and unbiased variance over {n_policy} policy tokens"
    )
    return "\n".join(out)


def format_json(ex: Explanation) -> str:
    """The explanation as one JSON object (full float precision)."""
    d: dict[str, Any] = ex.model_dump()
    return json.dumps(d, ensure_ascii=False)
