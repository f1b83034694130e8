"""Copy drills and the copy accuracies (``agentrl.train.copying``): a drill asks for each figure a page
states and answers with the page's sentence; the accuracies count every policy token, the figures'
tokens and each figure's first token, and a model wrong only where a figure begins is seen there."""

from __future__ import annotations

import random

import pytest
import torch

from agentrl.tokens import sampling_spec
from agentrl.train.copying import DRILL_PROMPT, copy_accuracy, copy_drills, figure_sentences
from agentrl.train.tokenizer import train_chat_tokenizer
from agentrl.trajectory import Message, Trajectory

PAGE = (
    "Title: Galandyne Holdings Announces First Quarter 2022 Results\n"
    "Total revenue for Q1 2022 was $33.0 billion. Logistics revenue was $7.4 billion.\n"
    "Net income for Q1 2022 was $4.6 billion.\n"
    "Ahead of the report, our analysts predict revenue of about $31.5 billion."
)


def _episode(i: int = 0, page: str = PAGE) -> Trajectory:
    return Trajectory(
        id=f"ep{i}",
        task_id="t",
        messages=[
            Message(role="system", content="Today is 2022-06-18."),
            Message(role="user", content="What was Galandyne Holdings' revenue in Q1 2022?"),
            Message(
                role="assistant",
                content='<tool_call>{"name": "open_url", "arguments": {"url": "u"}}</tool_call>',
            ),
            Message(role="tool", content=page),
            Message(role="assistant", content="Total revenue for Q1 2022 was $33.0 billion."),
        ],
    )


def test_the_sentences_that_state_a_figure():
    assert figure_sentences(PAGE) == [
        ("Total revenue for Q1 2022 was", "$33.0 billion"),
        ("Net income for Q1 2022 was", "$4.6 billion"),
    ]  # "Logistics revenue was" names no period; a preview's estimate states no result
    assert figure_sentences(
        "Revenue for Q1 2022 was $3.0 billion. Revenue for Q1 2022 was $3.0 billion."
    ) == [("Revenue for Q1 2022 was", "$3.0 billion")]


def test_a_drill_asks_for_each_figure_and_answers_with_the_pages_sentence():
    (drill,) = copy_drills(
        [_episode(), _episode(1, page="One figure: Revenue for Q1 2022 was $3.0 billion.")], random.Random(0)
    )
    system, page, *turns = drill.messages
    assert system.text == "Today is 2022-06-18." and page.text == f"{DRILL_PROMPT}\n\n{PAGE}"
    asked = {(q.text, a.text) for q, a in zip(turns[::2], turns[1::2], strict=True)}
    assert asked == {
        ("Total revenue for Q1 2022 was?", "Total revenue for Q1 2022 was $33.0 billion."),
        ("Net income for Q1 2022 was?", "Net income for Q1 2022 was $4.6 billion."),
    }
    assert [m.role for m in turns] == ["user", "assistant"] * 2 and drill.id == "ep0-drill"


class _Reader(torch.nn.Module):
    """A "model" whose most likely next token is the true one (it reads the row ahead), except right
    after ``wrong_after``, where it predicts token 0."""

    def __init__(self, vocab: int, wrong_after: int | None):
        super().__init__()
        self.vocab, self.wrong_after = vocab, wrong_after

    def forward(self, input_ids, attention_mask=None):
        nxt = torch.cat([input_ids[:, 1:], input_ids[:, :1]], dim=1)
        if self.wrong_after is not None:
            nxt = torch.where(input_ids == self.wrong_after, torch.zeros_like(nxt), nxt)
        return type("Out", (), {"logits": torch.nn.functional.one_hot(nxt, self.vocab).float()})()


@pytest.fixture(scope="module")
def tokenizer():
    return train_chat_tokenizer([PAGE, _episode().messages[2].text, "Today is 2022-06-18."] * 30, 400)


def test_the_accuracies_see_a_model_that_cannot_find_the_figure(tokenizer):
    expander = sampling_spec(tokenizer, max_len=512, max_new_tokens=80).expander(tokenizer)
    episodes = [_episode(i) for i in range(3)]
    right = copy_accuracy(_Reader(len(tokenizer), None), expander, episodes, tokenizer)
    assert right == {"tokens": 1.0, "figures": 1.0, "first_figure": 1.0}
    dollar = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(" $"))[-1]
    lost = copy_accuracy(_Reader(len(tokenizer), dollar), expander, episodes, tokenizer)
    # "33", ".", "0" are the figure's tokens: the first one wrong, the rest right
    n_figure = len(tokenizer.tokenize("33.0"))
    assert lost["first_figure"] == 0.0 and lost["figures"] == pytest.approx(1 - 1 / n_figure, abs=1e-4)
    assert 0.8 < lost["tokens"] < 1.0
