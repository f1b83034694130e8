"""World name schemes: ``syllables`` worlds never name a company a ``sandbox`` world can name, and
adding the scheme left every sandbox world as it was."""

from __future__ import annotations

import pytest

from agentrl.env.sandbox import build
from agentrl.env.sandbox.world import make_world, sandbox_stems


def test_sandbox_worlds_are_unchanged():
    # the quickstart's six companies (seed 0) as every build before the scheme existed drew them
    assert [c.name for c in make_world(0, 6)] == [
        "Ostionline Networks",
        "Velatek Group",
        "Zelexmark Networks",
        "Galandyne Holdings",
        "Wexafold Systems",
        "Quenorsphere Technologies",
    ]
    assert len(sandbox_stems()) == 5040


def test_a_drawn_sandbox_stem_is_skipped(monkeypatch):
    # random syllables rarely spell a sandbox stem (Ve-la-tek can), so force the draws to
    import agentrl.env.sandbox.world as world

    draws = iter(["Velatek", "Zelexmark", "Tobinar"])
    monkeypatch.setattr(world, "_syllable_stem", lambda rng: next(draws))
    assert [c.name.split()[0] for c in make_world(0, 1, "syllables")] == ["Tobinar"]


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_syllable_worlds_share_no_name_with_any_sandbox_world(seed):
    world = make_world(seed, 2000, "syllables")
    stems = {c.slug for c in world}
    assert len(stems) == 2000  # names never repeat within a world
    assert not {s.lower() for s in sandbox_stems()} & stems
    assert all(len(s) >= 5 for s in stems)


def test_a_syllable_build_is_deterministic_and_differs_from_the_sandbox(tmp_path):
    a = build(tmp_path / "a", seed=3, companies=2, names="syllables")
    b = build(tmp_path / "b", seed=3, companies=2, names="syllables")
    assert a["tasks"] == b["tasks"] and a["pages"] == b["pages"]
    assert (tmp_path / "a" / "tasks.jsonl").read_bytes() == (tmp_path / "b" / "tasks.jsonl").read_bytes()
    build(tmp_path / "c", seed=3, companies=2)
    assert (tmp_path / "a" / "tasks.jsonl").read_bytes() != (tmp_path / "c" / "tasks.jsonl").read_bytes()


def test_an_unknown_scheme_is_refused():
    with pytest.raises(ValueError, match="names: expected one of sandbox, syllables"):
        make_world(0, 1, "greek")


def test_excluded_stems_are_never_drawn():
    taken = {c.name.split()[0] for c in make_world(0, 6)}
    world = make_world(0, 50, "sandbox", taken)
    assert not {c.name.split()[0] for c in world} & taken
    assert make_world(0, 6, "sandbox", ()) == make_world(0, 6)  # nothing excluded: as before
