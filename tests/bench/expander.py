"""Benchmark: the TITO expander on a 128-turn trajectory with long tool outputs.

Run: ``python -m tests.bench.expander [--turns 128] [--tool-chars 3000] [--repeat 5]``

Reports the template renders per trajectory (the expander's must grow linearly with turns), and
the time of one expansion against (a) the naive method, re-rendering the whole conversation after
every turn, tokenizing it and diffing against the previous render, and (b) one plain
``tokenizer.encode`` of the full rendered text. Goals: ≥ 20x faster than naive at 128 turns,
within 2x of a single encode. Uses the in-process test tokenizer (ChatML family); no network.
"""

from __future__ import annotations

import argparse
import json
import time

from agentrl.tokens import Expander
from agentrl.tokens.template import message_to_template
from agentrl.trajectory import Message, Trajectory
from tests.tokens.fixtures import make_tokenizer, training_text


def make_trajectory(tok, turns: int, tool_chars: int) -> Trajectory:  # type: ignore[no-untyped-def]
    """``turns`` assistant turns, each a sampled tool call followed by a long tool result."""
    corpus = training_text()
    end = tok.convert_tokens_to_ids("<|im_end|>")
    msgs = [
        Message(role="system", content="You are a research agent. Today is 2025-05-15."),
        Message(
            role="user", content="Summarise Alphabet's Q1 2025 results, focusing on Google Cloud revenue."
        ),
    ]
    for k in range(turns):
        args = json.dumps({"query": f"alphabet cloud revenue part {k}"})
        text = f'I will search again.\n<tool_call>\n{{"name": "search", "arguments": {args}}}\n</tool_call>'
        ids = [*tok.encode(text, add_special_tokens=False), end]
        msgs.append(
            Message.model_validate(
                {
                    "role": "assistant",
                    "content": "I will search again.",
                    "tool_calls": [
                        {"id": f"c{k}", "type": "function", "function": {"name": "search", "arguments": args}}
                    ],
                    "token_ids": ids,
                    "logprobs": [-0.5] * len(ids),
                    "finish_reason": "stop",
                }
            )
        )
        start = (k * 997) % max(1, len(corpus) - tool_chars)
        msgs.append(Message(role="tool", tool_call_id=f"c{k}", content=corpus[start : start + tool_chars]))
    msgs.append(Message(role="assistant", content="Cloud revenue was 12.3 billion dollars."))
    return Trajectory(id="bench", task_id="bench", messages=msgs, reward={"total": 1.0})


def naive(tok, traj: Trajectory) -> tuple[list[int], int]:  # type: ignore[no-untyped-def]
    """Re-render the whole conversation before every assistant turn, tokenize it, keep the new suffix."""
    tm = [message_to_template(m) for m in traj.messages]
    ids: list[int] = []
    renders = 0
    for i, m in enumerate(traj.messages):
        if m.role != "assistant":
            continue
        text = tok.apply_chat_template(tm[:i], tokenize=False, add_generation_prompt=True)
        renders += 1
        full = tok.encode(text, add_special_tokens=False)
        ids = ids + full[len(ids) :]  # the diff against the previous render
        ids += list(m.token_ids or [])
    return ids, renders


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=128)
    ap.add_argument("--tool-chars", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    tok = make_tokenizer("chatml")
    exp = Expander(tok)
    results: dict[str, float] = {}
    for turns in sorted({8, 32, args.turns}):
        traj = make_trajectory(tok, turns, args.tool_chars)
        full_text = tok.apply_chat_template(
            [message_to_template(m) for m in traj.messages], tokenize=False, add_generation_prompt=False
        )
        before = exp.render_count()
        row = exp.expand(traj)
        renders = exp.render_count() - before
        t_exp = best(lambda traj=traj: exp.expand(traj), args.repeat)
        t_naive = best(lambda traj=traj: naive(tok, traj), max(1, args.repeat // 2))
        t_enc = best(lambda text=full_text: tok.encode(text, add_special_tokens=False), args.repeat)
        _, naive_renders = naive(tok, traj)
        print(
            f"turns={turns:4d} tokens={len(row):7d} chars={len(full_text):8d} | renders: expander {renders} "
            f"naive {naive_renders} (of up to {len(full_text) // 1000}k chars each) | expander {t_exp * 1e3:7.1f} ms, "
            f"naive {t_naive * 1e3:8.1f} ms ({t_naive / t_exp:5.1f}x), one encode {t_enc * 1e3:6.1f} ms "
            f"(expander/encode {t_exp / t_enc:4.2f})"
        )
        results[f"speedup_vs_naive_{turns}"] = t_naive / t_exp
        results[f"ratio_vs_encode_{turns}"] = t_exp / t_enc
        results[f"renders_{turns}"] = renders
    return results


if __name__ == "__main__":
    main()
