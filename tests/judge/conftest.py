"""Fixtures of the judge tests: a fake OpenAI-compatible judge server and trajectory builders."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from agentrl.trajectory import Trajectory
from tests.judge.fake_server import FakeJudgeServer

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

GOOD_REPORT = (
    "Alphabet's full-year 2025 report is not published yet (today is 2025-05-15), so these are Q1 2025 "
    "figures: Google Cloud revenue was $12.3 billion in the first quarter of 2025 \\cite{alphabet-q1-2025}."
)
GOSSIP_REPORT = (
    "Alphabet's 2025 revenue reached $5 trillion full-year revenue, with Google Cloud leading the growth "
    "\\cite{gossip-alphabet-2025}."
)
Q1_URL = "https://abc.xyz/investor/news/2025-04-24-q1-2025-results"
GOSSIP_URL = "https://buzzstock-gossip.example/t/google-2025-revenue-5-trillion"
#: The page each reference report was written from, as the env shows it (the rubrics pay a
#: citation only of a page the agent opened that prints the cited figure).
PAGES = {
    GOOD_REPORT: (
        Q1_URL,
        f"Title: Alphabet Announces First Quarter 2025 Results\nURL: {Q1_URL}\nPage 1 of 1\n\n"
        "Google Cloud revenue for Q1 2025 was $12.3 billion, up 28% year over year.",
    ),
    GOSSIP_REPORT: (
        GOSSIP_URL,
        f"Title: LEAKED: Google's 2025 financial results\nURL: {GOSSIP_URL}\nPage 1 of 1\n\n"
        "An insider says Alphabet's full-year 2025 revenue is $5 trillion.",
    ),
}


def make_trajectory(
    report: str,
    *,
    tid: str = "t0",
    prompt: str = "Summarise Google's 2025 financial results, focusing on Google Cloud revenue.",
    info: dict | None = None,
    sources: list[str] | None = None,
    urls: list[str] | None = None,
) -> Trajectory:
    """A small trajectory: a user prompt, open_url calls with their pages, and the final report.

    Without ``sources``, a reference report (``PAGES``) comes after opening the page it was written from.
    """
    messages: list[dict] = [{"role": "user", "content": prompt}]
    if sources is None and report in PAGES:
        urls, sources = [PAGES[report][0]], [PAGES[report][1]]
    for i, page in enumerate(sources or []):
        url = urls[i] if urls else f"https://example.com/{i}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {
                            "name": "open_url",
                            "arguments": f'{{"url": "{url}"}}',
                        },
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": page})
    messages.append({"role": "assistant", "content": report})
    return Trajectory(id=tid, task_id="alphabet-2025-cloud", messages=messages, info=info or {})


@pytest.fixture(scope="session")
def judge_server() -> Iterator[FakeJudgeServer]:
    """One fake judge for the whole session; tests use distinct model names to keep counts apart."""
    with FakeJudgeServer() as server:
        yield server
