"""Reading a report page back with the standard library's HTML parser."""

from html.parser import HTMLParser


class Page(HTMLParser):
    """Every start tag as (tag, attrs), the text of every <script>, and all the text."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._in_script = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        self.text.append(data)

    def all(self, tag: str, cls: str | None = None) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and (cls is None or cls in a.get("class", "").split())]


PAYLOAD = '<script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'


def add_hostile_trajectory(run_dir) -> str:
    """Append to step 1 of ``run_dir`` a trajectory whose every text field (id, task, messages, the
    policy's own sampled tokens, tool arguments, verdict reasoning, criterion ids, tool names) holds
    an HTML/script payload, with token numbers stored for it; add a metric named by the payload.
    Returns the trajectory's id."""
    import json

    import numpy as np
    from transformers import AutoTokenizer

    from agentrl.rundir import read_token_stats, write_token_stats
    from agentrl.tokens import Expander
    from agentrl.trajectory import (
        CriterionScore,
        Message,
        RewardBreakdown,
        ToolCall,
        Trajectory,
        read_trajectories,
        write_trajectories,
    )

    tok = AutoTokenizer.from_pretrained(run_dir / "tokenizer")
    sampled = [*tok.encode("Answer: " + PAYLOAD), tok.convert_tokens_to_ids(tok.eos_token)]
    traj = Trajectory(
        id="evil" + PAYLOAD + "#0",
        task_id="task" + PAYLOAD,
        messages=[
            Message(role="system", content="sys " + PAYLOAD),
            Message(role="user", content="user " + PAYLOAD),
            Message(
                role="assistant",
                content=None,
                reasoning_content="thinking " + PAYLOAD,
                tool_calls=[
                    ToolCall(id="c1" + PAYLOAD, function={"name": "search" + PAYLOAD, "arguments": json.dumps({"q": PAYLOAD})})
                ],
            ),
            Message(role="tool", tool_call_id="c1" + PAYLOAD, content="tool " + PAYLOAD),
            Message(role="assistant", token_ids=sampled, logprobs=[-0.5] * len(sampled), finish_reason="stop"),
        ],
        reward=RewardBreakdown(
            total=1.0,
            criteria=[
                CriterionScore(id="crit" + PAYLOAD, verdict="Fully Satisfied", score=1.0, weight=1.0,
                               reasoning="because " + PAYLOAD, judge_model="judge" + PAYLOAD),
            ],
            rubric_id="rubric" + PAYLOAD,
            error=None,
        ),
        info={
            "step": 1,
            "tool_log": [{"tool": "search" + PAYLOAD, "ok": False, "seconds": 0.1, "error": PAYLOAD}],
            "rubric": {"criteria": [{"id": "crit" + PAYLOAD, "text": "text " + PAYLOAD, "weight": 1.0}]},
            "truncated_reason": PAYLOAD,
        },
    )  # fmt: skip
    path = run_dir / "trajectories" / "step_00001.jsonl"
    write_trajectories(path, [*read_trajectories(path), traj])
    row = Expander(tok).expand(traj)
    pos = np.flatnonzero(row.loss_mask).astype(np.int64)
    stats_path = run_dir / "tokens" / "step_00001.npz"
    stats = read_token_stats(stats_path)
    fields = next(iter(stats.values())).keys() - {"positions"}
    entry = {"positions": pos}
    entry.update({f: np.linspace(-1, 1, pos.size, dtype=np.float32) for f in fields})
    stats[traj.id] = entry
    write_token_stats(stats_path, stats)
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 3.0, PAYLOAD: 1.0, "critic/score/mean": 0.5}) + "\n")
    return traj.id
