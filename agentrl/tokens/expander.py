"""The token expander: a ``Trajectory`` becomes the exact token sequence the policy was trained on.

Token-in-token-out (TITO): an assistant turn that carries ``token_ids`` is copied id for id, with
its logprobs; nothing sampled is ever decoded and re-encoded. Only what the framework wrote
(the prompt, the tail after a turn, tool results, user follow-ups, generation prompts) is rendered
and tokenized, each run of non-assistant messages as a delta cut from a render in a small constant
context (``ChatTemplate.run_delta``), so one trajectory costs O(turns) short renders, one
batched tokenizer call, and one full render that fork detection compares the row with. The mask and reward rules are in ``docs/tokens.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agentrl.errors import ForkError, TemplateError, TokenCheckError, TrajectoryFormatError
from agentrl.tokens.arrays import Segment, SegmentKind, TokenizedTrajectory
from agentrl.tokens.check import SegmentDiff, format_diffs, segment_diffs
from agentrl.tokens.cut import GUESS_CHARS_PER_TOKEN, SLACK_TOKENS, cut_plan, max_token_chars, reaches
from agentrl.tokens.forks import fork_reasons
from agentrl.tokens.selftest import TemplateReport, run_self_test
from agentrl.tokens.template import ChatTemplate, message_to_template
from agentrl.trajectory import Message, Trajectory, training_reward

__all__ = ["CheckMode", "Expander"]

CheckMode = Literal["strict", "ignore_whitespace", "off"]


@dataclass
class _Piece:
    kind: SegmentKind
    message_index: int
    turn: int = -1
    ids: list[int] | None = None  # sampled ids, or filled in after the batched encode
    text: str | None = None
    logprobs: list[float] | None = None
    drop_first: int | None = None  # the previous turn's sampled stop id, if the template repeats it
    stop_first: bool = False  # a retokenized turn's stop token may open this piece


#: Turn credit and the outcome it comes out of are placed on multiples of this step, so a row's
#: float32 scores sum to the same number in any order while |partial sums| < 16: equal rewards stay
#: equal (a group-normalised estimator keeps a group of ties at advantage 0).
_GRID = 2.0**-20


def _on_grid(x: float) -> float:
    return round(float(x) / _GRID) * _GRID


class Expander:
    """Turn trajectories into ``TokenizedTrajectory`` rows with one chat template.

    ``Expander(tokenizer, chat_template=None, max_len=None, **template_kwargs)``: ``tokenizer`` is a
    Hugging Face tokenizer; ``chat_template`` overrides its template; ``max_len`` cuts rows (all
    arrays stay aligned, ``truncated`` is set); ``template_kwargs`` go to every render (for example
    ``enable_thinking=False`` or ``tools=[...]``). Keyword-only options: ``check`` compares each row
    against a full render (``"strict"``, ``"ignore_whitespace"`` or ``"off"``); ``on_fork`` says what
    to do when the template would rewrite earlier turns (``"keep"`` the sequence as sampled and flag
    it, or ``"error"``); ``stop_token_ids`` overrides the inferred stop tokens; ``tool_arguments``
    passes tool-call arguments to the template as a ``"dict"`` (default) or the raw ``"string"``;
    ``train_retokenized`` sets ``loss_mask`` on turns without sampled ids (default True).

    Construction runs the template self-test (``self.report``) and raises ``TemplateError`` when
    the template cannot be expanded faithfully.
    """

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str | None = None,
        max_len: int | None = None,
        *,
        check: CheckMode = "off",
        on_fork: Literal["keep", "error"] = "keep",
        stop_token_ids: Iterable[int] | None = None,
        tool_arguments: Literal["dict", "string"] = "dict",
        train_retokenized: bool = True,
        **template_kwargs: Any,
    ) -> None:
        if check not in ("strict", "ignore_whitespace", "off"):
            raise ValueError(f"check must be 'strict', 'ignore_whitespace' or 'off', not {check!r}")
        if on_fork not in ("keep", "error"):
            raise ValueError(f"on_fork must be 'keep' or 'error', not {on_fork!r}")
        if max_len is not None and max_len < 1:
            raise ValueError(f"max_len must be positive, got {max_len}")
        self.template = ChatTemplate(tokenizer, chat_template, **template_kwargs)
        self.tokenizer = tokenizer
        self.max_len = max_len
        self.check = check
        self.on_fork = on_fork
        self.tool_arguments = tool_arguments
        self.train_retokenized = train_retokenized
        self.tail = self.template.assistant_tail()
        self._given_stops = None if stop_token_ids is None else frozenset(int(i) for i in stop_token_ids)
        self.stop_ids: frozenset[int] = self._given_stops or frozenset()
        added = tokenizer.get_added_vocab()
        self._think_id: int | None = added.get("<think>")
        self._max_token_chars: int | None = None  # measured on the first cut (agentrl.tokens.cut)
        self.report: TemplateReport = TemplateReport()
        self.report = run_self_test(self)
        if self._given_stops is None:
            self.stop_ids = frozenset(self.report.stop_token_ids)

    # ---- public API ------------------------------------------------------------------------------
    def expand(
        self,
        trajectory: Trajectory,
        turn_rewards: Sequence[float] | None = None,
        *,
        reward: float | None = None,
    ) -> TokenizedTrajectory:
        """One trajectory → one row of aligned ``[L]`` arrays (see ``TokenizedTrajectory``).

        The expander alone places rewards on tokens. The trajectory reward goes on the last policy
        token (``loss_mask = 1``) of the row as cut by ``max_len``: ``reward`` when given (the value
        a trainer trains on, ``training_reward(trajectory, normalize)``), else the rubric total; nothing
        is placed, whatever ``reward`` says, when ``training_reward`` is None (unscored, judge_error).
        ``turn_rewards`` (one float per assistant turn, or ``trajectory.info["turn_rewards"]``) are
        added on the last kept policy token of each turn, on top of the trajectory reward. When
        ``trajectory.info["prompt_token_ids"]`` holds the ids the engine fed as the first prompt
        (through the first generation prompt), they are used as they are instead of a render.
        """
        return self._expand(trajectory, turn_rewards, self.check, reward=reward)

    def expand_many(
        self,
        trajectories: Iterable[Trajectory],
        *,
        skip_unscored: bool = False,
    ) -> list[TokenizedTrajectory]:
        """``expand`` over many trajectories; ``skip_unscored`` drops those without a usable reward
        (reward null or ``judge_error``), which training must exclude."""
        rows = [self.expand(t) for t in trajectories]
        return [r for r in rows if r.scored] if skip_unscored else rows

    def diff(self, trajectory: Trajectory, mode: CheckMode = "strict") -> list[SegmentDiff]:
        """The differences ``mode`` reports between this trajectory's row and a full render, by
        segment, without raising (empty when they agree or ``mode`` is ``"off"``)."""
        if mode == "off":
            return []
        pieces, _ = self._plan(trajectory)
        ids, _, _, _, segments, extra = self._assemble(pieces)
        return segment_diffs(self, trajectory, ids, segments, self.find_forks(trajectory), mode, extra)

    def generation_prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """The ids a policy conditions on for its next turn: this expander's row for ``messages``
        (earlier turns exactly as sampled) followed by the generation prompt. Sampling from these
        ids makes the rollout's context identical to the training row (token-in-token-out)."""
        probe = Trajectory(
            id="_prompt",
            task_id="_prompt",
            messages=[*messages, Message(role="assistant", content="", token_ids=[], finish_reason="length")],
        )
        # An empty turn cut by the generation limit ends the row right after its generation prompt.
        return self._expand(probe, None, "off", find_forks=False).input_ids.tolist()

    def render_count(self) -> int:
        """Template renders made so far by this expander (the self-test included)."""
        return self.template.renders

    # ---- the expansion ---------------------------------------------------------------------------
    def _plan(self, traj: Trajectory) -> tuple[list[_Piece], bool]:
        """The pieces of the row in order, and whether a turn hit the generation limit."""
        t = self.template
        msgs = traj.messages
        tm = [message_to_template(m, self.tool_arguments, t.call_ids) for m in msgs]
        asst = [i for i, m in enumerate(msgs) if m.role == "assistant"]
        first = asst[0] if asst else len(msgs)
        pieces: list[_Piece] = []
        given = traj.info.get("prompt_token_ids")
        if given is not None:  # the engine recorded the prompt it fed: TITO for the prompt too
            pieces.append(_Piece("prompt", 0, ids=[int(i) for i in given]))
        elif first > 0:
            pieces.append(
                _Piece("prompt", 0, text=t.render(tm[:first], add_generation_prompt=first < len(msgs)))
            )
        for turn, i in enumerate(asst):
            m = msgs[i]
            stop: int | None = None
            if m.token_ids is not None:
                ids = list(m.token_ids)
                pieces.append(_Piece("sampled", i, turn, ids=ids, logprobs=m.logprobs))
                if m.finish_reason == "length":  # cut by the generation limit: the row ends here
                    return pieces, True
                stop = ids[-1] if ids else None
            else:
                text = t.assistant_text(tm[i])
                if not text.endswith(self.tail):
                    raise TemplateError(
                        f"message {i}: the template ends this assistant turn with {text[-30:]!r}, not with "
                        f"its usual end of turn {self.tail!r} (a different end after tool calls?); the "
                        "expander cannot tell which tokens the model sampled"
                    )
                text = text[: len(text) - len(self.tail)]
                if m.tool_calls and not m.tool_call_format:
                    lost = [c.function.name for c in m.tool_calls if c.function.name not in text]
                    if lost:
                        raise TemplateError(
                            f"message {i}: the chat template does not render this turn's tool call(s) {lost}, "
                            "so retokenizing it would train the turn without them; give the turn its sampled "
                            "token_ids, write the calls in its text (tool_format hermes), or pass a "
                            "chat_template that renders tool_calls"
                        )
                pieces.append(_Piece("retokenized", i, turn, text=text))
            nxt = asst[turn + 1] if turn + 1 < len(asst) else len(msgs)
            run = tm[i + 1 : nxt]
            if run or nxt < len(msgs):
                cont = self.tail + t.run_delta(run, add_generation_prompt=nxt < len(msgs))
                kind: SegmentKind = "observation"
            else:
                cont, kind = self.tail, "template"
            if cont:
                pieces.append(
                    _Piece(kind, i + 1, turn, text=cont, drop_first=stop, stop_first=m.token_ids is None)
                )
        return pieces, False

    def _encode(self, pieces: list[_Piece], max_len: int | None) -> None:
        """Tokenize the text pieces in one batch. With ``max_len``, each text is first cut to what
        the row can use (``agentrl.tokens.cut``: by characters, with a margin checked after
        tokenizing), so the cost is bounded by ``max_len``, not by the messages; the first
        ``max_len`` ids are those of the whole texts."""
        t = self.template
        todo = [p for p in pieces if p.ids is None]
        texts = [p.text or "" for p in todo]
        if max_len is not None and texts:
            need = max_len + SLACK_TOKENS
            if self._max_token_chars is None:
                self._max_token_chars = max_token_chars(self.tokenizer)
            c = self._max_token_chars
            for per_token in sorted({min(c, GUESS_CHARS_PER_TOKEN), c}):
                items = [(p.text or "") if p.ids is None else len(p.ids) for p in pieces]
                plan, first = cut_plan(items, need, per_token)
                if first is None:
                    break  # nothing to cut: the whole texts, in one batch below
                encoded = iter(t.encode_batch([x for x in plan if isinstance(x, str)]))
                got = [next(encoded) if isinstance(x, str) else None for x in plan]
                counts = [len(g) if g is not None else x for g, x in zip(got, plan, strict=True)]
                if reaches(counts, first, need):  # type: ignore[arg-type]
                    for p, g in zip(pieces, got, strict=True):
                        if g is not None:
                            p.ids = g
                    return
        for p, ids in zip(todo, t.encode_batch(texts), strict=True):
            p.ids = ids

    def _assemble(
        self, pieces: list[_Piece], max_len: int | None = None
    ) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray, list[Segment], list[int]]:
        """Tokenize the text pieces (``_encode``) and lay the pieces out: ids, loss mask, logprobs,
        turn ids, segments, and the positions of sampled stop tokens the template does not write.
        With ``max_len`` the ids past ``max_len`` may be those of cut texts: the caller cuts the row."""
        t = self.template
        self._encode(pieces, max_len)
        ids: list[int] = []
        spans: list[tuple[_Piece, int, int]] = []
        extra: list[int] = []  # sampled stop tokens that the template itself does not write
        for k, p in enumerate(pieces):
            pid = p.ids or []
            if p.drop_first is not None and pid and pid[0] == p.drop_first and pid[0] in t.added_ids:
                pid = pid[1:]  # the sampled stop token is also the template's next token: keep one
                p.ids = pid
            elif p.drop_first is not None and p.drop_first in self.stop_ids:
                extra.append(len(ids) - 1)
            if p.kind == "sampled" and pid and pid[-1] in self.stop_ids:
                nxt = pieces[k + 1] if k + 1 < len(pieces) else None
                if nxt is None or nxt.drop_first is None:
                    extra.append(len(ids) + len(pid) - 1)
            spans.append((p, len(ids), len(ids) + len(pid)))
            ids.extend(pid)
        n = len(ids)
        loss = np.zeros(n, dtype=np.int64)
        logp = np.zeros(n, dtype=np.float32)
        turns = np.full(n, -1, dtype=np.int64)
        segments: list[Segment] = []
        for p, a, b in spans:
            if p.kind == "sampled" or (p.kind == "retokenized" and self.train_retokenized):
                loss[a:b] = 1
                turns[a:b] = p.turn
                if p.logprobs is not None:
                    logp[a:b] = p.logprobs
            elif p.kind == "retokenized":
                turns[a:b] = p.turn
            elif p.stop_first and b > a and p.ids and p.ids[0] in self.stop_ids:
                loss[a] = 1 if self.train_retokenized else 0
                turns[a] = p.turn
            segments.append(
                Segment(p.kind, p.message_index, a, b, p.turn if p.kind in ("sampled", "retokenized") else -1)
            )
        return ids, loss, logp, turns, segments, extra

    def _expand(
        self,
        traj: Trajectory,
        turn_rewards: Sequence[float] | None,
        check: CheckMode,
        max_len: int | Literal["default"] | None = "default",
        *,
        reward: float | None = None,
        find_forks: bool = True,
    ) -> TokenizedTrajectory:
        max_len = self.max_len if max_len == "default" else max_len
        pieces, cut_by_length = self._plan(traj)
        # A check compares the whole row with a full render, so it needs every id.
        ids, loss, logp, turns, segments, extra = self._assemble(pieces, max_len if check == "off" else None)
        why = self._fork_reasons(traj, ids, extra, cut_by_length, segments, max_len) if find_forks else {}
        forks = sorted(why)
        if forks and self.on_fork == "error":
            raise ForkError(
                f"trajectory {traj.id!r}: the chat template rewrites earlier turns at message(s) {forks} "
                f"({'; '.join(why[f] for f in forks)}); a chat-API rollout saw a different history"
            )
        if check != "off":
            diffs = segment_diffs(self, traj, ids, segments, forks, check, extra)
            if diffs:
                raise TokenCheckError(f"trajectory {traj.id!r} ({check}): " + format_diffs(diffs))
        truncated = cut_by_length
        if max_len is not None and len(ids) > max_len:
            ids, loss, logp, turns = ids[:max_len], loss[:max_len], logp[:max_len], turns[:max_len]
            segments = [
                Segment(s.kind, s.message_index, s.start, min(s.end, max_len), s.turn)
                for s in segments
                if s.start < max_len
            ]
            truncated = True
        n = len(ids)
        scores, scored = self._place_rewards(traj, loss, turns, turn_rewards, reward)
        unknown = sorted(
            k
            for k, m in enumerate(x for x in traj.messages if x.role == "assistant")
            if m.token_ids is None or m.logprobs is None
        )
        prompt_len = segments[0].end if segments and segments[0].kind == "prompt" else 0
        return TokenizedTrajectory(
            trajectory_id=traj.id,
            input_ids=np.asarray(ids, dtype=np.int64),
            attention_mask=np.ones(n, dtype=np.int64),
            position_ids=np.arange(n, dtype=np.int64),
            loss_mask=loss,
            old_logprobs=logp,
            token_level_scores=scores,
            turn_ids=turns,
            prompt_len=prompt_len,
            retokenized_turns=[
                k
                for k, m in enumerate(x for x in traj.messages if x.role == "assistant")
                if m.token_ids is None
            ],
            unknown_logprob_turns=unknown,
            truncated=truncated,
            forks=forks,
            scored=scored,
            segments=segments,
        )

    @staticmethod
    def _place_rewards(
        traj: Trajectory,
        loss: np.ndarray,
        turns: np.ndarray,
        turn_rewards: Sequence[float] | None,
        reward: float | None,
    ) -> tuple[np.ndarray, bool]:
        """``token_level_scores`` ``[L]`` for a (possibly cut) row, and whether the trajectory reward
        was placed: each turn reward on its turn's last policy token, the trajectory reward (``reward``
        or ``reward.total``) on the row's last policy token, never on a masked token. Turn credit
        (``info["turn_credit"]``, ``agentrl.judge.credit``) is a share of the trajectory reward, not
        an addition: each turn's goes on its last policy token and what the row placed of it is taken
        off the trajectory reward, so the row's scores sum to what they sum to without it."""
        scores = np.zeros(len(loss), dtype=np.float32)
        turn_rewards = turn_rewards if turn_rewards is not None else traj.info.get("turn_rewards")
        n_turns = sum(1 for m in traj.messages if m.role == "assistant")
        for key, values in (("turn_rewards", turn_rewards), ("turn_credit", traj.info.get("turn_credit"))):
            if values is not None and len(values) != n_turns:
                raise TrajectoryFormatError(
                    f"trajectory {traj.id!r}: {key} has {len(values)} entries for {n_turns} "
                    "assistant turns; give one value per assistant message"
                )
        for k, r in enumerate(turn_rewards or ()):
            where = np.flatnonzero((turns == k) & (loss == 1))
            if where.size:  # a turn cut away by max_len loses its reward
                scores[where[-1]] += float(r)
        total = training_reward(traj, normalize=False)  # None: not trainable (the reward contract)
        if total is None:
            return scores, False
        where = np.flatnonzero(loss == 1)
        if not where.size:  # a row with nothing sampled gets no reward
            return scores, False
        outcome, moved = float(total if reward is None else reward), 0.0
        credit = traj.info.get("turn_credit")
        if credit is not None:
            outcome = _on_grid(outcome)
            for k, c in enumerate(credit):
                at = np.flatnonzero((turns == k) & (loss == 1))
                if at.size and c:  # a turn cut away by max_len leaves its credit on the outcome
                    scores[at[-1]] += _on_grid(c)
                    moved += _on_grid(c)
        scores[where[-1]] += outcome - moved  # moved: the credit this row placed on its turns
        return scores, True

    # ---- forks -------------------------------------------------------------------------------------
    def _fork_reasons(
        self,
        traj: Trajectory,
        ids: list[int],
        extra: list[int],
        cut: bool,
        segments: list[Segment],
        max_len: int | None,
    ) -> dict[int, str]:
        """``fork_reasons`` for a row about to be cut at ``max_len``: a row that fits is compared
        whole; a longer one (its texts may have been cut by characters) only over the messages
        before the segment that crosses ``max_len``, so the cost stays bounded by ``max_len`` and a
        cut text is never mistaken for a rewrite. Forks past the cut do not reach training."""
        if max_len is None or len(ids) <= max_len:
            return fork_reasons(self, traj, ids, extra, cut)
        first = min((s.message_index for s in segments if s.end > max_len), default=len(traj.messages))
        if first <= 0:
            return {}
        head = traj.model_copy(update={"messages": traj.messages[:first]})
        pieces, head_cut = self._plan(head)
        head_ids, _, _, _, _, head_extra = self._assemble(pieces, max_len)
        return fork_reasons(self, head, head_ids, head_extra, head_cut)

    def find_forks(self, traj: Trajectory) -> list[int]:
        """Message indices from which the template's re-render of the history differs from the
        appended sequence (see ``agentrl.tokens.forks``)."""
        pieces, cut = self._plan(traj)
        ids, _, _, _, _, extra = self._assemble(pieces)
        return sorted(fork_reasons(self, traj, ids, extra, cut))
