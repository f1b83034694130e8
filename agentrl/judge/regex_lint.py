"""A static check of rubric regexes for catastrophic backtracking (``agentrl rubric validate`` warns).

It walks the pattern as Python's own parser reads it (``re._parser``) and flags the two shapes
behind exponential matching times:

- a nested quantifier: a repeated group that holds a variable-length repeat which what follows
  it could also match, ``(a+)+``, ``(a*)*``, ``(\\w+\\s?)+``, ``(.*a){20}`` (not
  ``(?:\\d{1,3},)+``); atomic groups and possessive repeats are exempt;
- ambiguous alternation under a repeat: two alternatives that can start on the same character
  at the same point, ``(a|a)*``, ``(a|aa)+$``.

The check is a lint, not a proof: it may flag a harmless pattern and miss a slow one. What bounds
scoring is the time limit in ``agentrl.judge.bounds``.
"""

from __future__ import annotations

import re
import re._constants as C
import re._parser as P
import warnings
from collections.abc import Callable

from agentrl.judge.rubric import RegexGrader, Rubric

__all__ = ["backtracking_risks", "rubric_warnings"]

_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT)
_CATEGORY = {
    C.CATEGORY_DIGIT: r"\d",
    C.CATEGORY_NOT_DIGIT: r"\D",
    C.CATEGORY_SPACE: r"\s",
    C.CATEGORY_NOT_SPACE: r"\S",
    C.CATEGORY_WORD: r"\w",
    C.CATEGORY_NOT_WORD: r"\W",
}
# Characters tried when two character sets are compared (plus every literal of the two sets).
_PROBE = [chr(i) for i in range(0x250)] + ["\u03b1", "\u0416", "\u0660", "\u4e00", "\u2003", "\u20ac"]

Chars = list[Callable[[str], bool]]  # a set of characters, as membership tests


def _atom(op: object, av: object, fold: bool) -> Callable[[str], bool]:
    """A membership test for one character-consuming item of a parsed pattern."""

    def same(a: str, b: str) -> bool:
        return a == b or (fold and a.casefold() == b.casefold())

    if op == C.LITERAL:
        return lambda ch: same(ch, chr(av))  # type: ignore[arg-type]
    if op == C.NOT_LITERAL:
        return lambda ch: not same(ch, chr(av))  # type: ignore[arg-type]
    if op == C.IN:
        items = list(av)  # type: ignore[call-overload]
        negate = bool(items) and items[0][0] == C.NEGATE
        tests = [_atom(o, a, fold) for o, a in items if o != C.NEGATE]
        return lambda ch: negate != any(t(ch) for t in tests)
    if op == C.RANGE:
        lo, hi = av  # type: ignore[misc]
        return lambda ch: lo <= ord(ch) <= hi or (fold and lo <= ord(ch.swapcase()[:1] or ch) <= hi)
    if op == C.CATEGORY and av in _CATEGORY:
        cat = re.compile(_CATEGORY[av])  # type: ignore[index]
        return lambda ch: cat.fullmatch(ch) is not None
    return lambda ch: True  # ANY, a back-reference, anything unknown: any character


def _first(seq: list, fold: bool) -> tuple[Chars, bool]:
    """(characters a match of ``seq`` can start with, whether it can match the empty string)."""
    out: Chars = []
    for op, av in seq:
        if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
            continue  # zero-width
        if op == C.SUBPATTERN or op == C.ATOMIC_GROUP:
            chars, empty = _first(list(av[-1] if op == C.SUBPATTERN else av), fold)
        elif op in (*_REPEATS, C.POSSESSIVE_REPEAT):
            chars, empty = _first(list(av[2]), fold)
            empty = empty or av[0] == 0
        elif op == C.BRANCH:
            chars, empty = [], False
            for alt in av[1]:
                c, e = _first(list(alt), fold)
                chars, empty = chars + c, empty or e
        elif op == C.GROUPREF_EXISTS:
            chars, empty = [lambda ch: True], True
        else:
            chars, empty = [_atom(op, av, fold)], False
        out += chars
        if not empty:
            return out, False
    return out, True


def _probes(chars: Chars) -> frozenset[int]:
    """The probe characters (indices into ``_PROBE``) that ``chars`` holds."""
    return frozenset(i for i, ch in enumerate(_PROBE) if any(t(ch) for t in chars))


def _overlap(a: Chars, b: Chars) -> bool:
    return not _probes(a).isdisjoint(_probes(b))


def _any_two_overlap(sets: list[Chars]) -> bool:
    """Whether two of ``sets`` share a probe character: each set's probes once, then one pass (the
    pairwise comparison was quadratic in the alternatives: 200 of them took 23 s)."""
    seen: set[int] = set()
    for chars in sets:
        mine = _probes(chars)
        if not mine.isdisjoint(seen):
            return True
        seen |= mine
    return False


def _variable(av: tuple) -> bool:
    lo, hi, _ = av
    return hi != lo and (hi == C.MAXREPEAT or hi > 1)


def _walk(seq: list, fold: bool, loop: list | None, after: list, found: list[str]) -> None:
    """Record risky shapes in ``seq``; ``loop`` is the body of the innermost enclosing repeat
    (None outside any), ``after`` what follows ``seq`` inside that body."""
    items = list(seq)
    for i, (op, av) in enumerate(items):
        rest = items[i + 1 :] + after
        if op in _REPEATS:
            lo, hi, body = av
            body = list(body)
            # Inside a repeated group, a variable repeat is ambiguous when what follows it (the
            # rest of the group, then the group again) can start on a character it can take.
            if loop is not None and _variable(av):
                mine, follow = _first(body, fold)[0], _first(rest + loop, fold)[0]
                if _overlap(mine, follow):
                    found.append(f"nested quantifier: a repeated group holds a {{{lo},{_hi(hi)}}} repeat")
            if hi > 1:
                _walk(body, fold, body, [], found)
            else:
                _walk(body, fold, loop, rest, found)
        elif op == C.SUBPATTERN:
            _walk(list(av[-1]), fold, loop, rest, found)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            _walk(list(av[1]), fold, None, [], found)
        elif op == C.BRANCH:
            alts = [list(a) for a in av[1]]
            # After an alternative comes the rest of the loop body, then the next iteration.
            if loop is not None and _any_two_overlap([_first(a + rest + loop, fold)[0] for a in alts]):
                found.append("ambiguous alternation: two alternatives under a repeat can match the same text")
            for a in alts:
                _walk(a, fold, loop, rest, found)
        # ATOMIC_GROUP and POSSESSIVE_REPEAT never backtrack into themselves: not walked.


def _hi(hi: int) -> str:
    return "" if hi == C.MAXREPEAT else str(hi)


def backtracking_risks(pattern: str, ignore_case: bool = False) -> list[str]:
    """Why ``pattern`` may backtrack catastrophically (one line per risk, no duplicates); [] when
    the check sees no risk. A pattern Python cannot parse is reported as such."""
    try:
        with warnings.catch_warnings():  # re's FutureWarnings were shown when the rubric loaded
            warnings.simplefilter("ignore")
            parsed = P.parse(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as e:
        return [f"cannot be parsed: {e}"]
    except RecursionError:
        return ["nested too deeply to check"]
    fold = bool(parsed.state.flags & re.IGNORECASE)
    found: list[str] = []
    try:
        _walk(list(parsed), fold, None, [], found)
    except RecursionError:
        found.append("nested too deeply to check")
    return list(dict.fromkeys(found))


def rubric_warnings(rubric: Rubric) -> list[str]:
    """One line per regex criterion of ``rubric`` whose pattern may backtrack catastrophically."""
    out = []
    for i, c in enumerate(rubric.criteria):
        g = c.grader
        if isinstance(g, RegexGrader):
            for risk in backtracking_risks(g.pattern, g.ignore_case):
                out.append(
                    f"criteria[{i}] ({c.id}): pattern {g.pattern!r} may backtrack catastrophically: {risk}"
                )
    return out
