"""The criterion texts of the rubric that actually scored each trajectory, for the report.

The judge records the rubric it used on the trajectory (``info.rubric``: its content). A trajectory
that holds only a path or an id there (a suite's task rubric by name), or nothing (written before
the judge recorded it), gets the texts of the rubric file it names, or of the run's ``judge.rubric``
override (``config.json``), which scored every trajectory of the run. A file that cannot be read
gives no texts: the report shows the verdicts anyway.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.trajectory import Trajectory

__all__ = ["RubricTexts", "criterion_texts"]

Texts = dict[str, tuple[str, str]]  # criterion id → (kind, text)


def criterion_texts(rubric: Any) -> Texts:
    """Criterion id → (kind, text) of a rubric mapping (the YAML's or ``info.rubric``'s shape)."""
    out: Texts = {}
    if not isinstance(rubric, dict):
        return out
    for c in rubric.get("criteria") or []:
        if isinstance(c, dict) and isinstance(c.get("id"), str):
            weight = c.get("weight", 1)
            negative = isinstance(weight, int | float) and weight < 0
            kind = c.get("kind") or ("negative" if negative else "positive")
            out[c["id"]] = (str(kind), str(c.get("text", "")))
    return out


class RubricTexts:
    """Looks up, per trajectory, the texts of the rubric that scored it (files read once each)."""

    def __init__(self, run_dir: Path, override: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.override = override if isinstance(override, str) and override else None
        self._files: dict[str, tuple[str | None, Texts]] = {}

    def _file(self, spec: str) -> tuple[str | None, Texts]:
        """(rubric id, texts) of the rubric file ``spec`` names."""
        if spec not in self._files:
            data = self._load(spec)
            rid = data.get("id") if isinstance(data, dict) and isinstance(data.get("id"), str) else None
            self._files[spec] = (rid, criterion_texts(data))
        return self._files[spec]

    def _load(self, spec: str) -> Any:
        from agentrl.errors import AgentRLError
        from agentrl.yamlload import indexed, load_yaml, read_text

        names = [spec] if spec.endswith((".yaml", ".yml")) or "/" in spec else [spec, f"rubrics/{spec}.yaml"]
        for name in names:
            # as written (from where the run was started), then beside the run directory
            for path in (Path(name), self.run_dir / name, self.run_dir.parent / name):
                try:
                    if path.is_file():
                        text = read_text(path, error=AgentRLError, missing="no such file", what="rubric")
                        return load_yaml(text, str(path), error=AgentRLError, name=indexed)[0]
                except (OSError, AgentRLError):
                    continue
        return None

    def of(self, t: Trajectory) -> Texts:
        """Criterion id → (kind, text) of the rubric that scored ``t`` (``{}`` when unknown). The
        sources, most trusted last: a recorded rubric whose id is not the reward's (the task's, left
        by an older judge under an override), the file ``info.rubric`` names, the run's override,
        and the recorded rubric the reward names."""
        recorded = t.info.get("rubric")
        override = self._file(self.override) if self.override is not None else None
        expected = (t.reward.rubric_id if t.reward is not None else None) or (
            override[0] if override else None
        )
        used = isinstance(recorded, dict) and (expected is None or recorded.get("id") in (None, expected))
        out: Texts = {}
        if isinstance(recorded, dict) and not used:
            out.update(criterion_texts(recorded))
        if isinstance(recorded, str) and recorded:
            out.update(self._file(recorded)[1])
        if override is not None:
            out.update(override[1])
        if used:
            out.update(criterion_texts(recorded))
        return out
