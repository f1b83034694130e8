"""The generated sandbox web: a seeded world of fictional companies, rendered as pages and tasks.

``build(out_dir, seed=..., companies=..., heldout=...)`` writes ``corpus.jsonl``, ``tasks.jsonl``
and ``env.yaml``; ``materialize(seed, companies, heldout)`` builds once into the cache directory and
returns it. Both are deterministic: the same seed and sizes give byte-identical files.

``heldout`` more companies are drawn after the first ``companies`` (so the training world is the
same whatever ``heldout`` is): their pages are in the same corpus — one web — and their tasks carry
``"split": "heldout"``, which training never draws (``Suite.tasks_in``). Names never repeat within a
world, so a held-out company shares no name, URL or figure series with a training one: answering
about it takes research, not recall.

``worlds`` cuts the companies into separate webs of ``companies`` each (``worlds * companies``
training companies, then ``heldout`` more, in worlds of their own): every page and task names its
world (``w0``, ``w1``, ...) and a task searches and opens only its world's pages (the sandbox
backend's scope). So a run can train on many companies, each seen rarely, while every episode
researches a web as small as one world (issue 36: worlds that never repeat).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from agentrl.cachedir import cache_root
from agentrl.errors import ConfigError

__all__ = ["GENERATOR_VERSION", "LLM_CRITERION", "MAX_COMPANIES", "build", "excluded_stems", "materialize"]

#: The most companies one build generates: the generator has 5,040 distinct company names, and
#: 2,000 companies are 230,000 pages and 22,000 tasks, about a minute and 0.6 GB on one core.
MAX_COMPANIES = 2000

#: Bump when the generator's output changes, so cached builds are not reused.
GENERATOR_VERSION = 5

_ENV_YAML = """\
# Generated sandbox suite (agentrl sandbox build). Defaults for the env; a run's config overrides them.
search: {backend: sandbox}
fetch: {backend: sandbox}
budgets: {max_turns: 8, max_tool_calls: 16}
"""


#: The optional LLM criterion (``build(..., llm_criteria=True)``): what regexes cannot check.
LLM_CRITERION = {
    "id": "sourcing",
    "text": "Attributes each figure to the official source it comes from and does not present analyst "
    "predictions or rumours as reported results.",
    "weight": 0.5,
}


def build(
    out_dir: str | os.PathLike[str],
    *,
    seed: int = 0,
    companies: int = 50,
    heldout: int = 0,
    llm_criteria: bool = False,
    long_horizon: bool = False,
    progress: Callable[[int, int], None] | None = None,
    names: str = "sandbox",
    exclude: Collection[str] = (),
    worlds: int = 1,
) -> dict[str, Any]:
    """Write a sandbox suite into ``out_dir``; returns counts (pages, tasks, by kind, family and split).

    ``heldout``: companies after the first ``companies`` whose tasks are the ``heldout`` split.
    ``llm_criteria`` adds ``LLM_CRITERION`` to every rubric (scoring then needs a judge model).
    ``long_horizon`` adds the multi-source families (``agentrl.env.sandbox.multi``: growth between
    two years, a comparison of companies, every quarter of a year so far; and
    ``agentrl.env.sandbox.correction``: a figure restated by a later filing, whose amendments are
    appended to the corpus), drawn from an RNG of their own after the single-source tasks, which
    stay as they were (as does every other page: the corpus without them is a prefix of the corpus
    with them).
    ``companies`` is at most ``MAX_COMPANIES`` (``ConfigError`` otherwise, before any work);
    ``progress(done, total)`` is called after each company is rendered. ``names``: how company names
    are drawn and ``exclude`` the stems never drawn (``agentrl.env.sandbox.world.make_world``;
    ``syllables`` never names a company any ``sandbox`` build has). ``out_dir`` is created only
    when the files are written, so a build stopped while it generates leaves nothing behind.
    ``worlds`` > 1: ``worlds * companies`` training companies in worlds of ``companies`` (the held-out
    ones after them, in worlds of ``companies`` too); each page and task carries its ``world``. With
    ``worlds`` 1 nothing is tagged and the files are as before.
    """
    from agentrl.env.sandbox.correction import make_corrections
    from agentrl.env.sandbox.multi import make_multi_tasks
    from agentrl.env.sandbox.pages import render_company
    from agentrl.env.sandbox.tasks import make_tasks
    from agentrl.env.sandbox.world import make_world

    if companies < 1:
        raise ValueError("companies must be at least 1")
    if heldout < 0:
        raise ValueError("heldout companies must be at least 0")
    if worlds < 1:
        raise ValueError("worlds must be at least 1")
    if worlds > 1 and long_horizon:
        raise ConfigError("worlds: the long-horizon families compare companies across one web; use worlds: 1")
    per_world, companies = companies, companies * worlds
    if companies + heldout > MAX_COMPANIES:
        raise ConfigError(
            f"companies: {companies + heldout} is over the cap of {MAX_COMPANIES} (the generator has 5,040 "
            f"company names; {MAX_COMPANIES} companies are already {MAX_COMPANIES * 115:,} pages)"
        )
    out = Path(out_dir)
    world = make_world(seed, companies + heldout, names, exclude)
    page_rng, task_rng = random.Random(seed * 7919 + 1), random.Random(seed * 104729 + 2)
    pages: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for i, comp in enumerate(world, 1):
        cp = render_company(comp, page_rng)
        made = make_tasks(comp, {p["id"]: p for p in cp}, task_rng)
        if i > companies:  # train tasks carry no key: a world without held-out companies is unchanged
            for t in made:
                t["split"] = "heldout"
        if worlds > 1:  # the held-out companies come after the last full world: worlds of their own
            for item in (*cp, *made):
                item["world"] = f"w{(i - 1) // per_world}"
        pages.extend(cp)
        tasks.extend(made)
        if progress is not None:
            progress(i, companies + heldout)
    if long_horizon:
        by_id = {p["id"]: p for p in pages}
        multi_rng = random.Random(seed * 15485863 + 3)
        tasks.extend(make_multi_tasks(world[:companies], by_id, multi_rng))
        if heldout:
            for t in make_multi_tasks(world[companies:], by_id, multi_rng):
                t["split"] = "heldout"
                tasks.append(t)
        # the restatements come last, from the same RNG (the other families stay as they were), and
        # after every other task is drawn, so none of them asks for a figure a restatement replaces
        for group, split in ((world[:companies], None), (world[companies:], "heldout")):
            filings, made = make_corrections(group, by_id, tasks, multi_rng)
            pages.extend(filings)
            for t in made:
                if split:
                    t["split"] = split
                tasks.append(t)
    if llm_criteria:
        for t in tasks:
            t["rubric"]["criteria"].append(dict(LLM_CRITERION))
            t["ground_truth"]["max_score"] += LLM_CRITERION["weight"]
    tmp = out / ".tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    with (tmp / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for p in pages:
            f.write(json.dumps(p, ensure_ascii=False, sort_keys=True) + "\n")
    with (tmp / "tasks.jsonl").open("w", encoding="utf-8") as f:
        for t in tasks:
            f.write(json.dumps(t, ensure_ascii=False, sort_keys=True) + "\n")
    (tmp / "env.yaml").write_text(_ENV_YAML, encoding="utf-8")
    for name in ("corpus.jsonl", "env.yaml", "tasks.jsonl"):  # tasks last: its presence marks a full build
        (tmp / name).replace(out / name)
    tmp.rmdir()
    kinds: dict[str, int] = {}
    for p in pages:
        kinds[p["kind"]] = kinds.get(p["kind"], 0) + 1
    families: dict[str, int] = {}
    splits: dict[str, int] = {}
    for t in tasks:
        families[t["family"]] = families.get(t["family"], 0) + 1
        splits[t.get("split", "train")] = splits.get(t.get("split", "train"), 0) + 1
    return {
        "pages": len(pages),
        "tasks": len(tasks),
        "kinds": kinds,
        "families": families,
        "splits": splits,
        "out": str(out),
    }


def excluded_stems(exclude_worlds: Collection[tuple[int, int]]) -> frozenset[str]:
    """The company stems (``Ostionline`` of ``Ostionline Networks``) of the sandbox worlds
    ``(seed, companies)`` (held-out companies included: a world of 3 + 3 is ``(seed, 6)``)."""
    from agentrl.env.sandbox.world import make_world

    return frozenset(c.name.split()[0] for seed, n in exclude_worlds for c in make_world(seed, n))


def materialize(
    seed: int = 0,
    companies: int = 50,
    heldout: int = 0,
    long_horizon: bool = False,
    worlds: int = 1,
    exclude_worlds: Collection[tuple[int, int]] = (),
    names: str = "sandbox",
) -> Path:
    """The directory of the sandbox for ``(seed, companies, heldout, long_horizon, worlds, names)``,
    built into the cache on first use. ``exclude_worlds``: ``(seed, companies)`` of sandbox worlds whose
    companies this one never names (``excluded_stems``)."""
    name = f"v{GENERATOR_VERSION}-seed{seed}-c{companies}" + (f"-h{heldout}" if heldout else "")
    if worlds > 1:
        name += f"-w{worlds}"
    if names != "sandbox":
        name += f"-{names}"
    if exclude_worlds:
        name += "-x" + "_".join(f"{s}.{n}" for s, n in sorted(exclude_worlds))
    if long_horizon:
        from agentrl.env.sandbox.multi import MULTI_VERSION

        name += f"-long{MULTI_VERSION}"
    out = cache_root() / "sandbox" / name
    if (out / "tasks.jsonl").exists():
        return out
    # Two processes may build the same sandbox at once (a test run's workers, two runs): each
    # builds into a directory of its own and renames it into place; the first rename wins.
    mine = out.parent / f".{name}.tmp-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(mine, ignore_errors=True)
    build(
        mine, seed=seed, companies=companies, heldout=heldout, long_horizon=long_horizon, worlds=worlds,
        exclude=excluded_stems(exclude_worlds), names=names,
    )  # fmt: skip
    if out.exists() and not (out / "tasks.jsonl").exists():
        shutil.rmtree(out, ignore_errors=True)  # a build stopped halfway, before this fix
    try:
        os.replace(mine, out)
    except OSError:  # another process renamed its build into place first: the same files
        shutil.rmtree(mine, ignore_errors=True)
    return out
