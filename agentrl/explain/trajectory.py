"""Explain one stored trajectory: its turns, then its policy tokens with the numbers of the update.

The numbers (scores, rewards, values, advantages, returns, each a full-length [L] array over the
expander's row) are given by the caller: ``agentrl.replay`` rebuilds them exactly as the trainer
did, or reads those a training run stored. This module lays them out: every policy token as one
row of the ``--arrays`` table, every masked span (prompt, tool observation, template) as one line,
the reward's token marked, and the advantages summed per turn, so the turn that got the credit
shows.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from agentrl.explain.arrays import _pad, _show_token, _width
from agentrl.explain.turns import TurnView, format_turns, trajectory_turns
from agentrl.trajectory import Trajectory

__all__ = [
    "MaskedSpan",
    "TrajectoryExplanation",
    "TurnCredit",
    "explain_trajectory",
    "format_trajectory",
    "format_trajectory_json",
]


class MaskedSpan(BaseModel):
    """Tokens ``[start, end)`` with ``loss_mask`` 0: what the policy did not write."""

    start: int
    end: int
    kind: str
    preview: str


class TurnCredit(BaseModel):
    """The advantages of one turn's policy tokens, summed (as the update used them)."""

    turn: int
    label: str
    tokens: int
    advantage_sum: float
    advantage_mean: float


class TrajectoryExplanation(BaseModel):
    """Everything ``format_trajectory`` prints. ``tokens`` holds one dict per policy token (``t``,
    ``turn``, ``token``, ``score``, ``reward``, and ``value``, ``delta``, ``advantage``,
    ``whitened``, ``return`` where they apply); ``advantage`` there is before whitening."""

    id: str
    task_id: str
    index: int
    reward_total: float | None
    algorithm: str
    gamma: float
    lam: float
    values_from: str
    source: str
    turns: list[TurnView]
    spans: list[MaskedSpan] = Field(default_factory=list)
    tokens: list[dict[str, Any]] = Field(default_factory=list)
    reward_token: int | None = None
    credit: list[TurnCredit] = Field(default_factory=list)
    advantage_total: float = 0.0
    whitened: bool = False
    notes: list[str] = Field(default_factory=list)


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _span_kind(row: Any, a: int, b: int) -> str:
    kinds: list[str] = []
    for s in getattr(row, "segments", []):
        if s.start < b and s.end > a and s.kind not in kinds:
            kinds.append(s.kind)
    if a == 0 and "prompt" not in kinds:
        kinds.insert(0, "prompt")
    return "+".join(kinds) or "masked"


def explain_trajectory(
    traj: Trajectory,
    *,
    index: int,
    row: Any = None,
    tokenizer: Any = None,
    numbers: dict[str, np.ndarray] | None = None,
    algorithm: str = "grpo",
    gamma: float = 1.0,
    lam: float = 0.95,
    values_from: str = "zero",
    source: str = "recomputed",
    notes: list[str] | None = None,
) -> TrajectoryExplanation:
    """Lay out one trajectory. ``row`` is its ``TokenizedTrajectory`` and ``numbers`` maps
    ``token_level_scores``, ``token_level_rewards``, ``values``, ``raw_advantages``, ``advantages``,
    ``returns`` to [L] arrays over that row (``advantages`` as the update used them;
    ``raw_advantages`` before whitening, PPO only; ``values``/``returns`` PPO only). Without a row
    or numbers only the turns are filled in. δ = reward + γ·V(next policy token) − V is computed
    here (PPO) with ``agentrl.algos.td_residuals``."""
    turns = trajectory_turns(traj)
    ex = TrajectoryExplanation(
        id=traj.id,
        task_id=traj.task_id,
        index=index,
        reward_total=traj.reward.total if traj.reward else None,
        algorithm=algorithm,
        gamma=gamma,
        lam=lam,
        values_from=values_from,
        source=source,
        turns=turns,
        notes=list(notes or []),
    )
    if row is None or numbers is None or tokenizer is None:
        return ex
    ids = row.input_ids.tolist()
    mask = row.loss_mask.astype(bool)
    L = len(ids)
    n = {k: np.asarray(v, dtype=np.float64)[:L] for k, v in numbers.items() if v is not None}
    ppo = algorithm == "ppo"
    delta = None
    if ppo and "values" in n:
        import torch

        from agentrl.algos import td_residuals

        m = torch.from_numpy(mask.astype(np.float64))[None]
        delta = td_residuals(
            torch.from_numpy(n["token_level_rewards"])[None], torch.from_numpy(n["values"])[None], m, gamma
        )[0].numpy()
    ex.whitened = ppo and "raw_advantages" in n
    # Masked spans, each one line.
    t = 0
    while t < L:
        if mask[t]:
            t += 1
            continue
        a = t
        while t < L and not mask[t]:
            t += 1
        text = _show_token(_decode(tokenizer, ids[a:t]))
        ex.spans.append(
            MaskedSpan(
                start=a,
                end=t,
                kind=_span_kind(row, a, t),
                preview=text if len(text) <= 70 else text[:69] + "…",
            )
        )
    on = np.flatnonzero(mask)
    scores = n.get("token_level_scores", np.zeros(L))
    nz = [int(i) for i in on if scores[i] != 0.0]
    ex.reward_token = nz[-1] if nz else (int(on[-1]) if on.size else None)
    for i in on:
        i = int(i)
        d: dict[str, Any] = {
            "t": i,
            "turn": int(row.turn_ids[i]),
            "token": _decode(tokenizer, [ids[i]]),
            "score": float(scores[i]),
            "reward": float(n.get("token_level_rewards", scores)[i]),
        }
        if ppo:
            d["value"] = float(n["values"][i]) if "values" in n else 0.0
            d["delta"] = float(delta[i]) if delta is not None else None
            d["advantage"] = float(n["raw_advantages"][i] if ex.whitened else n["advantages"][i])
            if ex.whitened:
                d["whitened"] = float(n["advantages"][i])
            if "returns" in n:
                d["return"] = float(n["returns"][i])
        else:
            d["advantage"] = float(n["advantages"][i])
        ex.tokens.append(d)
    used = "whitened" if ex.whitened else "advantage"
    by_turn: dict[int, list[float]] = {}
    for d in ex.tokens:
        by_turn.setdefault(d["turn"], []).append(d[used])
    labels = {v.turn: v.label for v in turns}
    for k in sorted(by_turn):
        xs = by_turn[k]
        ex.credit.append(
            TurnCredit(
                turn=k,
                label=labels.get(k, "?"),
                tokens=len(xs),
                advantage_sum=float(sum(xs)),
                advantage_mean=float(sum(xs) / len(xs)),
            )
        )
    ex.advantage_total = float(sum(d[used] for d in ex.tokens))
    return ex


def _legend(ex: TrajectoryExplanation) -> str:
    if ex.algorithm == "ppo":
        return (
            "value = V(s_t) before token t; reward = score − β·KL; δ = reward + γ·V(next policy token) − value; "
            "advantage = GAE over policy tokens (masked spans skipped); return = advantage + value"
            + ("; whitened = what the update used" if ex.whitened else "")
        )
    return (
        f"{ex.algorithm}: every policy token of the trajectory gets the same advantage, its summed reward "
        "compared with the other samples of its task"
    )


def format_trajectory(ex: TrajectoryExplanation, decimals: int = 4) -> str:
    """The explanation as text: header, turns, the token table with masked spans collapsed to one
    line each and the reward's token marked, then the per-turn advantage sums."""
    total = "–" if ex.reward_total is None else f"{ex.reward_total:g}"
    out = [
        f"trajectory {ex.id} (index {ex.index}, task {ex.task_id}), reward {total}",
        "",
        format_turns(ex.turns),
    ]
    out += [f"note: {n}" for n in ex.notes]
    if not ex.tokens:
        return "\n".join(out)
    num = f"{{:.{decimals}f}}"
    cols = ["t", "turn", "token", "score", "reward"]
    keys = ["t", "turn", "token", "score", "reward"]
    if ex.algorithm == "ppo":
        cols += ["value", "δ", "advantage"] + (["whitened"] if ex.whitened else []) + ["return"]
        keys += ["value", "delta", "advantage"] + (["whitened"] if ex.whitened else []) + ["return"]
    else:
        cols += ["advantage"]
        keys += ["advantage"]
    rows: list[tuple[int, list[str] | str]] = []
    for d in ex.tokens:
        cells = []
        for k in keys:
            v = d.get(k)
            if k == "token":
                cells.append(_show_token(v))
            elif k in ("t", "turn"):
                cells.append(str(v))
            else:
                cells.append("–" if v is None else num.format(v))
        rows.append((d["t"], cells))
    for s in ex.spans:
        k = s.end - s.start
        rows.append((s.start, f'[{s.kind}: {k} token{"s" * (k != 1)}, masked] "{s.preview}"'))
    rows.sort(key=lambda r: r[0])
    spans = {s.start: s for s in ex.spans}
    cell_rows = [c for _, c in rows if isinstance(c, list)]
    widths = [max(_width(c) for c in [h] + [r[i] for r in cell_rows]) for i, h in enumerate(cols)]

    def where(s: MaskedSpan) -> str:
        return str(s.start) if s.end - s.start == 1 else f"{s.start}–{s.end - 1}"

    tw = max(widths[0], max((len(where(s)) for s in ex.spans), default=0))
    widths[0] = tw

    def line(cells: list[str]) -> str:
        return "  ".join(_pad(c, w, right=h != "token") for c, w, h in zip(cells, widths, cols, strict=True))

    out += [
        "",
        f"{ex.algorithm}, γ = {ex.gamma:g}, λ = {ex.lam:g}; values: {ex.values_from}; numbers: {ex.source}",
        f"legend: {_legend(ex)}",
        line(cols).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    for start, c in rows:
        if isinstance(c, str):
            s = spans[start]
            out.append(_pad(where(s), tw, right=True) + "  " + c)
        else:
            text = line(c).rstrip()
            out.append(text + ("  ◀ reward" if start == ex.reward_token else ""))
    used = "whitened advantage" if ex.whitened else "advantage"
    out += ["", f"credit per turn (Σ {used} over the turn's policy tokens, as the update used them):"]
    lw = max([len("total")] + [len(f"turn {c.turn}  {c.label}") for c in ex.credit])
    lw = min(lw, 72)
    for c in ex.credit:
        lab = f"turn {c.turn}  {c.label}"
        lab = lab if len(lab) <= lw else lab[: lw - 1] + "…"
        out.append(
            f"  {lab.ljust(lw)}  {c.tokens:5d} tokens  Σ {num.format(c.advantage_sum):>10}  "
            f"mean {num.format(c.advantage_mean)}"
        )
    n_tok = sum(c.tokens for c in ex.credit)
    out.append(f"  {'total'.ljust(lw)}  {n_tok:5d} tokens  Σ {num.format(ex.advantage_total):>10}")
    return "\n".join(out)


def format_trajectory_json(ex: TrajectoryExplanation) -> str:
    """The explanation as one JSON object (full float precision)."""
    return json.dumps(ex.model_dump(), ensure_ascii=False)
