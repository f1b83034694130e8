"""A scripted oracle for sandbox tasks: search, open the official source, answer from it.

A multi-source task (``ground_truth.steps``, ``agentrl.env.sandbox.multi``) is solved step by step:
search the step's query, open its source, and so on for every step, then answer with the report
template's ``<FIGUREk>`` and ``<URLk>`` filled from the k-th page opened.

With ``noise`` = p it opens, with probability p per episode (per step of a multi-source task), one
of the task's distractors (a gossip page or an analyst preview, or the superseded 10-Q of a
restatement, visible at the task date *and listed in its search results*) instead of the official
source, and states that page's figure as fact, so rewards spread the way a
real policy's would. It never opens a URL it has not seen, since a demonstration that did would
teach a model to write URLs from memory: when its search did not list the page it chose, it
searches again with the task's ``followup_query`` (the headline of the release that holds the
figure: the Q4 release for a full year, the latest reported quarter for a trap; two results, to
keep the context short), and only then opens it (on the default sandbox, 77 of 550 episodes
search twice; before the follow-up, those 77 opened an unlisted page; ``agentrl.eval.research``'s
``url_from_context`` measures it). At noise 0 it
scores the rubric maximum on every sandbox task. Its turns are Hermes ``<tool_call>`` text (or
OpenAI ``tool_calls`` with ``style="openai"``), so they exercise the env's parser.

Asked for its notes (context management's ``summarize``: the last message is ``SUMMARY_REQUEST``),
it lists its calls so far, one per line (``- search: QUERY``, ``- open_url: URL``); after the rewrite
it reads them back from the task's message, so it goes on where it was (the search results it had
not opened yet are gone with the old context: with noise, that step opens the official source).
"""

from __future__ import annotations

import json
import random
from typing import Any, Literal

from agentrl.policy.base import EpisodeContext
from agentrl.seeds import stable_seed
from agentrl.trajectory import FunctionCall, Message, ToolCall
from agentrl.trajectory.context import SUMMARY_HEADER, SUMMARY_REQUEST
from agentrl.trajectory.tools import TOOLS

__all__ = ["OraclePolicy"]


class OraclePolicy:
    """The scripted solver; ``noise`` in [0, 1]."""

    def __init__(self, noise: float = 0.0, style: Literal["hermes", "openai"] = "hermes"):
        if not 0.0 <= noise <= 1.0:
            raise ValueError("noise must be in [0, 1]")
        self.noise = noise
        self.style = style
        self.name = f"oracle(noise={noise:g})"

    def _source(self, messages: list[Message], ctx: EpisodeContext) -> dict[str, Any] | None:
        """The page to open and answer from: the official release, or (noise) a distractor listed
        in the first tool result (the search); the same choice at every turn of an episode."""
        gt = ctx.ground_truth
        official = gt.get("official")
        listed = next((m.text for m in messages if m.role == "tool"), "")
        visible = [
            d
            for d in gt.get("distractors", [])
            if d.get("date", "") <= ctx.date and d.get("url") and d["url"] in listed
        ]
        rng = random.Random(stable_seed(ctx.seed, ctx.task_id, bits=64))
        if rng.random() < self.noise and visible:
            return rng.choice(visible)
        return official

    def _call(self, name: str, args: dict[str, Any], turn: int) -> Message:
        if self.style == "openai":
            call = ToolCall(id=f"call_{turn}", function=FunctionCall(name=name, arguments=json.dumps(args)))
            return Message(role="assistant", content="", tool_calls=[call])
        body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
        return Message(role="assistant", content=f"<tool_call>\n{body}\n</tool_call>")

    def _step_source(self, step: dict[str, Any], k: int, listed: str, ctx: EpisodeContext) -> dict[str, Any]:
        """The page of step ``k`` to open: its official source, or (noise) a distractor that the
        step's search listed."""
        visible = [
            d
            for d in step.get("distractors", [])
            if d.get("date", "") <= ctx.date and d.get("url") and d["url"] in listed
        ]
        rng = random.Random(stable_seed(ctx.seed, ctx.task_id, k, bits=64))
        if rng.random() < self.noise and visible:
            return rng.choice(visible)
        return step["official"]

    def _act_in_steps(self, messages: list[Message], ctx: EpisodeContext, turn: int) -> Message:
        """Turns 2k and 2k+1: search step k's query, open its source; then answer from them all."""
        steps = ctx.ground_truth["steps"]
        calls = _calls(messages)
        k, opening = divmod(turn, 2)
        if k < len(steps) and not opening:
            return self._call("search", {"query": steps[k]["query"], "k": 5}, turn)
        if k < len(steps):
            listed = calls[2 * k][2] if 2 * k < len(calls) else ""
            return self._call("open_url", {"url": self._step_source(steps[k], k, listed, ctx)["url"]}, turn)
        # the pages it opened, read off its own calls (a rewritten context shows old results as stubs)
        opened = [arg for name, arg, _ in calls if name == "open_url"]
        report = ctx.ground_truth["report"]
        for j, step in enumerate(steps):
            url = opened[j] if j < len(opened) else step["official"]["url"]
            src = next(
                (c for c in [step["official"], *step.get("distractors", [])] if c.get("url") == url),
                step["official"],
            )
            report = report.replace(f"<FIGURE{j + 1}>", src["figure"]).replace(f"<URL{j + 1}>", src["url"])
        return self._call("answer", {"report": report}, turn)

    async def act(self, messages: list[Message], ctx: EpisodeContext) -> Message:
        """Search; when the search did not list the chosen source and the task has a follow-up
        query, search that; open the source; answer from it (a multi-source task: a search and a
        page per step, then the answer)."""
        if messages and messages[-1].role == "user" and messages[-1].text == SUMMARY_REQUEST:
            notes = "\n".join(f"- {name}: {arg}" for name, arg, _ in _calls(messages[:-1]))
            return Message(role="assistant", content=notes or "- nothing yet")
        calls = _calls(messages)
        turn = len(calls) if _notes(messages) else sum(1 for m in messages if m.role == "assistant")
        gt = ctx.ground_truth
        if gt and gt.get("steps"):
            return self._act_in_steps(messages, ctx, turn)
        src = self._source(messages, ctx)
        if not gt or src is None:
            return self._call("answer", {"report": "I could not find a reliable answer."}, turn)
        if turn and not calls:  # a caller that shows earlier turns without their calls: go by turn
            if turn == 1:
                return self._call("open_url", {"url": src["url"]}, turn)
            return self._answer(gt, src, turn)
        searches = [result for name, _, result in calls if name == "search"]
        if not searches:
            return self._call("search", {"query": gt.get("query", ""), "k": 5}, turn)
        if not any(name == "open_url" for name, _, _ in calls):
            followup = gt.get("followup_query")
            if followup and len(searches) == 1 and src["url"] not in searches[0]:
                return self._call("search", {"query": followup, "k": 2}, turn)
            return self._call("open_url", {"url": src["url"]}, turn)
        return self._answer(gt, src, turn)

    def _answer(self, gt: dict[str, Any], src: dict[str, Any], turn: int) -> Message:
        """The report from the page ``src`` (the rumour's template for a distractor)."""
        template = gt["report"] if src.get("kind") == "official" else gt.get("rumor_report", gt["report"])
        report = template.replace("<FIGURE>", src["figure"]).replace("<CITE>", src["id"])
        report = report.replace("<URL>", src.get("url", src["id"]))
        return self._call("answer", {"report": report}, turn)

    async def aclose(self) -> None:
        """Nothing to release."""


def _notes(messages: list[Message]) -> list[tuple[str, str, str]]:
    """The calls listed in the notes of a summarized context (in the task's message), in order."""
    task = next((m.text for m in messages if m.role == "user"), "")
    if SUMMARY_HEADER not in task:
        return []
    out = []
    for line in task.split(SUMMARY_HEADER, 1)[1].splitlines():
        name, sep, arg = line.removeprefix("- ").partition(": ")
        if sep and name in ("search", "open_url"):
            out.append((name, arg.strip(), ""))
    return out


def _calls(messages: list[Message]) -> list[tuple[str, str, str]]:
    """Every ``search`` / ``open_url`` call of the episode so far as (name, query or URL, the tool
    result shown after it or ""): the notes of a summarized context, then the calls of the turns
    shown (the turns kept verbatim after the notes repeat their last calls, counted once). The env
    adds its parse of calls written as text to each turn's ``tool_calls``."""
    shown: list[tuple[str, str, str]] = []
    for i, m in enumerate(messages):
        if m.role != "assistant":
            continue
        result = messages[i + 1].text if i + 1 < len(messages) and messages[i + 1].role == "tool" else ""
        for c in m.tool_calls or []:
            try:
                args = c.function.parsed_arguments()
            except ValueError:
                continue
            if isinstance(args, dict) and c.function.name in ("search", "open_url"):
                shown.append((c.function.name, str(args.get(TOOLS[c.function.name].arg, "")), result))
    notes = _notes(messages)
    same = lambda a, b: [x[:2] for x in a] == [x[:2] for x in b]  # noqa: E731
    repeat = max(
        (n for n in range(min(len(notes), len(shown)), 0, -1) if same(notes[-n:], shown[:n])), default=0
    )
    return notes[: len(notes) - repeat] + shown
