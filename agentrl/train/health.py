"""Whether RL can learn from what the policy samples: checked on the first RL step (the policy the
warm start left) and watched on every step after.

GRPO learns only from groups whose rewards differ: a group of all-0 (or all-equal) rewards has every
advantage 0. A warm start that left the policy unable to call tools, or opening URLs that do not
exist, gives exactly such groups, and the run then spends its steps on nothing. ``health_metrics``
measures it per step (logged with the step's metrics); ``HealthWatch`` turns it into one warning
line: after step 1, when the warm-started policy's tool calls mostly fail to run, its opened URLs
mostly do not exist, or most groups carry no signal; later, when ``window`` steps in a row had
(almost) no group with a signal.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from agentrl.trajectory import Trajectory, training_reward
from agentrl.trajectory.tools import tools_with_role

__all__ = ["HealthWatch", "health_metrics"]

#: info counters of a tool call the env could not run (the parser's and the tools' refusals)
_REFUSED = ("format_errors", "unknown_tools", "arg_errors")


def health_metrics(trajs: Sequence[Trajectory], normalize: bool = True) -> dict[str, float]:
    """``env/tool_call_valid``: tool calls the env ran ÷ tool calls it was sent (refused ones in
    ``format_errors``, ``unknown_tools``, ``arg_errors``); ``env/open_url_ok``: ``open_url`` calls that
    returned a page ÷ ``open_url`` calls; ``train/groups_without_signal``: share of the step's groups
    (trajectories of one task, at least two scored) whose rewards are all equal. A ratio with nothing
    to count is left out."""
    ran = sum(t.info.get("tool_calls", 0) for t in trajs)
    refused = sum(t.info.get(k, 0) for t in trajs for k in _REFUSED)
    opened = [
        e.get("ok") is True
        for t in trajs
        for e in t.info.get("tool_log") or []
        if isinstance(e, dict) and e.get("tool") in tools_with_role("page")
    ]
    groups: dict[str, list[float]] = defaultdict(list)
    for t in trajs:
        if (reward := training_reward(t, normalize)) is not None:
            groups[t.task_id].append(reward)
    scored = [g for g in groups.values() if len(g) >= 2]
    m: dict[str, float] = {}
    if ran + refused:
        m["env/tool_call_valid"] = ran / (ran + refused)
    if opened:
        m["env/open_url_ok"] = sum(opened) / len(opened)
    if scored:
        m["train/groups_without_signal"] = sum(max(g) - min(g) < 1e-9 for g in scored) / len(scored)
    return m


class HealthWatch:
    """The warnings of ``health_metrics`` (see the module docstring); ``check`` returns the lines
    to show after a step (usually none)."""

    def __init__(self, window: int = 10, floor: float = 0.5, no_signal: float = 0.75) -> None:
        self.window, self.floor, self.no_signal = window, floor, no_signal
        self.silent = 0  # steps in a row with (almost) no group carrying a signal
        self.first = True

    def check(self, m: dict[str, float]) -> list[str]:
        lines: list[str] = []
        share = m.get("train/groups_without_signal")
        if self.first:
            self.first = False
            weak = []
            if m.get("env/tool_call_valid", 1.0) < self.floor:
                weak.append(f"only {m['env/tool_call_valid']:.0%} of its tool calls ran")
            if m.get("env/open_url_ok", 1.0) < self.floor:
                weak.append(f"only {m['env/open_url_ok']:.0%} of the URLs it opened exist")
            if share is not None and share >= self.no_signal:
                weak.append(f"{share:.0%} of the groups have equal rewards (no GRPO signal)")
            if weak:
                lines.append(
                    "warning: the policy RL starts from is weak: " + "; ".join(weak) + " — a longer or "
                    "less noisy warm start (sft_steps, sft_noise) or more samples per task (group_size) helps"
                )
        self.silent = self.silent + 1 if share is not None and share >= 0.95 else 0
        if self.silent == self.window:
            lines.append(
                f"warning: {self.window} steps in a row without a learning signal (every group's rewards "
                "equal): the update changes nothing"
            )
        return lines
