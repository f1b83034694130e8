"""Which episode a stored trajectory is: its (task, sample) key, one trajectory per key, its suite.

``agentrl rollout`` and evaluation during training write one trajectory per (task, sample), and a
sample's env seed depends only on the seed, the task and the sample (``agentrl.seeds``). So a key
seen twice in what is scored together is a file concatenated with itself, or two policies' files
pooled: ``one_per_episode`` refuses it, for ``agentrl eval`` and ``agentrl eval compare`` alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from agentrl.errors import ConfigError
from agentrl.trajectory import Trajectory

__all__ = ["EpisodeKey", "one_per_episode", "pair_key", "suites"]

EpisodeKey = tuple[str, int]

_SAMPLE = re.compile(r"#(\d+)$")


def pair_key(t: Trajectory) -> EpisodeKey:
    """(task id, sample) of a trajectory: ``info.sample``, else the ``#N`` ending its id, else 0."""
    sample = t.info.get("sample")
    if not isinstance(sample, int):
        m = _SAMPLE.search(t.id)
        sample = int(m.group(1)) if m else 0
    return t.task_id, sample


def one_per_episode(sources: Iterable[tuple[str, Iterable[Trajectory]]]) -> dict[EpisodeKey, Trajectory]:
    """Every trajectory of ``sources`` (``(name, trajectories)``: a file and what it holds) by its
    ``pair_key``, in order. A key held twice, scored or not, is a ``ConfigError`` naming the key,
    both trajectory ids and the file (or the two files) that hold them."""
    out: dict[EpisodeKey, Trajectory] = {}
    where: dict[EpisodeKey, tuple[int, str]] = {}  # (which source, its name): a file given twice is two
    for i, (name, trajectories) in enumerate(sources):
        for t in trajectories:
            key = pair_key(t)
            if key in out:
                files = name if where[key][0] == i else f"{where[key][1]} and {name}"
                raise ConfigError(
                    f"{files}: task {key[0]!r} sample {key[1]} appears twice ({out[key].id!r} and "
                    f"{t.id!r}); score one episode per (task, sample): a file concatenated with itself, "
                    "or two policies' files pooled, counts some episodes twice"
                )
            out[key], where[key] = t, (i, name)
    return out


def suites(trajectories: Sequence[Trajectory]) -> list[str]:
    """The suites the trajectories were rolled out on (``info.suite``, as recorded), sorted."""
    return sorted({str(t.info["suite"]) for t in trajectories if t.info.get("suite")})
