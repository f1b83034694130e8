"""What a research base must copy, taught and measured: copy drills built from the pages an oracle
opened, and teacher-forced accuracies on the policy's tokens and on the figures of its answers.

Why drills: in an episode, the figure of the answer is the one place where the model must find a
number in a page by the sentence around it (the page prints several "… was $N billion"; the answer
repeats one sentence up to its figure). That is 3 of the ~100 tokens an episode trains, and the
research base's second attempt never learned it: 1,200 steps on episodes alone left the first token
of an answer's figure right 5–9% of the time, on held-out companies and on its own training worlds
alike, while 99% of its other tokens were right (BENCHMARKS.md, "A research base"). A copy drill
gives that signal densely: the page, then one question per figure it prints ("Net income for Q1
2022 was?"), each answered with the page's own sentence (with them, the third attempt's first
figure token was right 55% of the time).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

import torch

from agentrl.env.sandbox.world import MONEY
from agentrl.tokens import collate
from agentrl.trajectory import Message, Trajectory

__all__ = ["DRILL_PROMPT", "copy_accuracy", "copy_drills", "figure_sentences"]

#: The first user message of a drill, before the page.
DRILL_PROMPT = "Quote the sentence of this page that gives each figure I ask for."

# "Total revenue for Q1 2022 was" + "$33.0 billion": a sentence of a release or a filing that states
# a figure, split before the figure (a preview's "predict revenue of about $31.5 billion" is not one).
_SENTENCE = re.compile(r"([A-Z][\w-]*(?: [\w-]+)*? (?:for|in) [^.\n$]*? was) (" + MONEY.pattern + ")")


def figure_sentences(page: str) -> list[tuple[str, str]]:
    """The figure-stating sentences of ``page`` as (the words before the figure, the figure), each once,
    in page order."""
    return list(dict.fromkeys(_SENTENCE.findall(page)))


def copy_drills(episodes: Sequence[Trajectory], rng: random.Random) -> list[Trajectory]:
    """One drill per episode whose last observation (the page it opened last) states two or more
    figures: the episode's system message, the page, then each figure asked for in an order drawn by
    ``rng`` and answered with the page's sentence."""
    out = []
    for ep in episodes:
        pages = [m.text for m in ep.messages if m.role == "tool"]
        pairs = figure_sentences(pages[-1]) if pages else []
        if len(pairs) < 2:
            continue
        rng.shuffle(pairs)
        msgs = [ep.messages[0], Message(role="user", content=f"{DRILL_PROMPT}\n\n{pages[-1]}")]
        for words, figure in pairs:
            msgs += [
                Message(role="user", content=f"{words}?"),
                Message(role="assistant", content=f"{words} {figure}."),
            ]
        out.append(Trajectory(id=f"{ep.id}-drill", task_id=ep.task_id, messages=msgs))
    return out


@torch.no_grad()
def copy_accuracy(
    model: torch.nn.Module, expander: Any, trajectories: Sequence[Trajectory], tokenizer: Any
) -> dict[str, float]:
    """Teacher-forced accuracy on the policy's tokens: the share of them that are the model's most
    likely next token, given the episode so far. On noise-free oracle episodes of companies the model
    never saw, almost every such token is copied from the question or a tool result. ``tokens``: all
    of them; ``figures``: the tokens of the figures after a ``$`` (``33``, ``.``, ``0``);
    ``first_figure``: each figure's first token, the one that must be found in the page."""
    from agentrl.train.sft import sft_rows

    dollar = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(" $"))[-1]  # " $", or its last piece
    numeric = {
        i
        for i in range(len(tokenizer))
        if (s := tokenizer.decode([i]).strip()) and all(c.isdigit() or c == "." for c in s)
    }
    was = model.training
    model.eval()
    hits = dict.fromkeys(("tokens", "figures", "first_figure"), 0)
    totals = dict.fromkeys(hits, 0)
    for i in range(0, len(trajectories), 8):
        batch = collate(sft_rows(expander, trajectories[i : i + 8]), pad_token_id=tokenizer.pad_token_id)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        right = logits[:, :-1].argmax(-1) == batch["input_ids"][:, 1:]
        target, mask = batch["input_ids"][:, 1:].tolist(), (batch["loss_mask"][:, 1:] > 0).tolist()
        for r, row in enumerate(target):
            in_figure = after_dollar = False
            for j, tok in enumerate(row):
                if not mask[r][j]:
                    in_figure = after_dollar = False
                    continue
                in_figure = (in_figure or after_dollar) and tok in numeric
                for kind, counted in (
                    ("tokens", True),
                    ("figures", in_figure),
                    ("first_figure", after_dollar),
                ):
                    if counted:
                        hits[kind] += int(right[r, j])
                        totals[kind] += 1
                after_dollar = tok == dollar
    model.train(was)
    return {k: round(hits[k] / max(totals[k], 1), 4) for k in hits}
