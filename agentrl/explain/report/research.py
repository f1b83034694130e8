"""The report's "Research or recall" section: the three shares of ``agentrl.eval.research`` (the one
implementation; ``agentrl eval`` scorecards show the same) for the run's evaluations (before RL and
the last one, ``eval/step_NNNNN.jsonl``) and its first and last RL steps' trajectories
(``trajectories/step_NNNNN.jsonl``).

An agent that researches the question it is asked searches for its subject, opens pages its tool
results listed and states figures printed on pages it opened; one that recalls its training world
searches for its training companies and writes URLs and figures from memory. The evaluation rows
(held-out tasks by default) beside the training rows tell the two apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from pathlib import Path

from agentrl.eval.research import SHARE_LABELS, ResearchShares, research_shares
from agentrl.explain.report.tables import table
from agentrl.rundir import RunDir
from agentrl.trajectory import read_trajectories

__all__ = ["ResearchRow", "research_rows", "research_section"]


@dataclass(frozen=True)
class ResearchRow:
    """The shares of one stored file's episodes."""

    label: str
    path: Path
    episodes: int
    shares: ResearchShares


def research_rows(run: RunDir) -> list[ResearchRow]:
    """One row for each of: the evaluation before RL (step 0), the last evaluation after an RL step,
    the first and the last RL step's trajectories; those the run has, in that order."""
    evals, steps = run.eval_files(), run.trajectory_files()
    picked: list[tuple[str, Path]] = []
    if 0 in evals:
        picked.append(("evaluation before RL", evals[0]))
    if after := max((s for s in evals if s > 0), default=0):
        picked.append((f"evaluation after step {after}", evals[after]))
    if steps:
        first, last = min(steps), max(steps)
        picked.append((f"RL step {first} (first), training tasks", steps[first]))
        if last != first:
            picked.append((f"RL step {last} (last), training tasks", steps[last]))
    rows = []
    for label, path in picked:
        trajs = list(read_trajectories(path))
        rows.append(ResearchRow(label, path, len(trajs), research_shares(trajs)))
    return rows


def research_section(rows: list[ResearchRow]) -> str:
    """The section's HTML: a table of ``rows`` (hits/total and share per cell), or a note when the
    run stored no evaluation and no trajectory."""
    head = '<section id="research"><h2>Research or recall</h2>'
    if not rows:
        note = "No evaluation (eval/) and no RL step's trajectories (trajectories/) are stored."
        return f'{head}<p class="note">{note}</p></section>'
    cells = [
        [f'<span title="{escape(str(r.path))}">{escape(r.label)}</span>', str(r.episodes)]
        + [escape(s.text()) for s in r.shares.shares().values()]
        for r in rows
    ]
    about = (
        '<p class="note">Counted over calls and answers, not episodes (<code>agentrl.eval.research</code>, '
        "docs/eval.md): of the <code>search</code> calls, those whose query names a capitalised name of "
        "the question; of the <code>open_url</code> calls, those whose URL an earlier tool result printed; "
        "of the answers that state a figure, those whose every figure is on a page the episode opened. "
        "A policy that researches scores high on all three; one that recalls its training world low on "
        "the evaluation's tasks (held-out by default), however it does on its training tasks. "
        "A dash: nothing to count.</p>"
    )
    head_cells = ["episodes of", "episodes", *SHARE_LABELS.values()]
    return f"{head}{about}{table(head_cells, cells, 'research')}</section>"
