"""The template self-test, run when an ``Expander`` is built.

Over a small matrix of mock conversations (plain answer, a tool call, parallel tool calls, a user
follow-up, reasoning turns, no system prompt), each a whole conversation (system, user, assistant
with tool calls, tool results, assistant) so that templates that insist on a real conversation
(Llama-3.1 with ``tools=`` refuses a system message alone) render every case, it first learns:

- which tool-call id style the template accepts (``call_1`` as the env writes them, else 9
  alphanumeric characters as Mistral templates require); the expander then writes ids that way;
- whether the template renders OpenAI ``tool_calls`` at all (SmolLM2-style ChatML ignores them:
  the mock calls are then written in the text, Hermes-style, as such a model must write them);

and then checks that:

1. rendering is append-only at turn boundaries: the text before a generation prompt, and the text
   up to the end of an assistant turn, are prefixes of every later render. Where it is not, the change must
   be a rewrite of an earlier *assistant* turn (Qwen3-style removal of ``<think>`` content, or a
   turn rendered differently once it is no longer last); those are handled (TITO keeps what was
   sampled; a trajectory whose sampled turns differ from the template's re-render lists ``forks``).
   A rewrite of any other message is refused with ``TemplateError``.
2. tool-call arguments are printed verbatim, or re-serialised (then noted; turns sampled in another
   JSON spelling are forks, as in 1);
3. the fixed-context deltas give exactly the text of a full render on every mock, and the same ids
   except where BPE merges across a turn boundary (flagged ``boundary_merges``: the expander keeps
   the boundary the inference engine saw); and splicing the turns back in as sampled ids (stop
   token included) reproduces the same row.

It also takes the stop tokens from ``agentrl.tokens.stops.template_stop_ids`` (the one owner, also
behind ``turn_stop_ids``): the template's end-of-turn id (for templates with no tail, GLM-style, the
role headers that follow an assistant turn) and the EOS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agentrl.errors import TemplateError
from agentrl.tokens.arrays import Segment, TokenizedTrajectory
from agentrl.tokens.check import Rendering, format_diffs, segment_diffs
from agentrl.tokens.stops import template_stop_ids
from agentrl.tokens.template import CallIdStyle, message_to_template
from agentrl.trajectory import Message, Trajectory

__all__ = ["SelfTested", "TemplateReport", "calls_in_text", "mock_conversations", "run_self_test"]


@dataclass
class TemplateReport:
    """What the self-test learnt about a chat template."""

    assistant_tail: str = ""
    generation_prompt: str = ""
    stop_token_ids: list[int] = field(default_factory=list)
    strips_reasoning: bool = False
    rewrites_assistant: bool = False
    generation_prompt_differs: bool = False
    reserialises_tool_json: bool = False
    renders_tool_calls: bool = True
    call_id_style: CallIdStyle = "as_is"
    boundary_merges: bool = False
    double_bos_risk: bool = False
    skipped_cases: list[str] = field(default_factory=list)
    cases: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def append_only(self) -> bool:
        return not (
            self.strips_reasoning
            or self.rewrites_assistant
            or self.reserialises_tool_json
            or self.generation_prompt_differs
        )

    @property
    def diagnoses(self) -> list[str]:
        """One short phrase per way the template departs from plain append-only rendering."""
        out = []
        if not self.renders_tool_calls:
            out.append("does not render tool calls")
        if self.reserialises_tool_json:
            out.append("re-serialises tool JSON")
        if self.strips_reasoning:
            out.append("strips reasoning")
        if self.rewrites_assistant or self.generation_prompt_differs:
            out.append("rewrites history")
        return out

    def describe_rewrites(self) -> str:
        parts = []
        if self.strips_reasoning:
            parts.append("it removes earlier reasoning at a user follow-up")
        if self.rewrites_assistant:
            parts.append("it renders an assistant turn differently once it is no longer last")
        if self.reserialises_tool_json:
            parts.append("it re-serialises tool-call JSON")
        if self.generation_prompt_differs:
            parts.append("its generation prompt differs from how it writes a finished assistant turn")
        return "; ".join(parts) or "append-only"


class SelfTested(Rendering, Protocol):
    """What the self-test uses of the ``Expander`` it tests: the comparison's attributes, the
    tokenizer, the report and stop tokens it fills in, and the expander's own planning, assembly
    and expansion, so that the round trips run the code that expands real trajectories."""

    tokenizer: Any
    report: TemplateReport
    on_fork: Literal["keep", "error"]
    _given_stops: frozenset[int] | None

    def _plan(self, traj: Trajectory) -> tuple[list[Any], bool]: ...

    def _assemble(self, pieces: list[Any]) -> tuple[list[int], Any, Any, Any, list[Segment], list[int]]: ...

    def _expand(
        self,
        traj: Trajectory,
        turn_rewards: Any,
        check: Literal["strict", "ignore_whitespace", "off"],
        max_len: int | Literal["default"] | None = "default",
    ) -> TokenizedTrajectory: ...


def _call(i: int, name: str, args: str) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


def mock_conversations() -> dict[str, list[Message]]:
    """The self-test matrix: named mock conversations in OpenAI format."""
    sys = Message(role="system", content="You are a research agent.")
    user = Message(role="user", content="Summarise the Q1 results.")
    search = _call(1, "search", '{"query": "alphabet q1 cloud revenue"}')
    opened = _call(2, "open_url", '{"url": "https://abc.xyz/q1"}')
    A = Message.model_validate
    return {
        "plain": [sys, user, A({"role": "assistant", "content": "Revenue grew 12 percent."})],
        "no_system": [user, A({"role": "assistant", "content": "Revenue grew."})],
        "tool": [
            sys,
            user,
            A({"role": "assistant", "content": "I will search.", "tool_calls": [search]}),
            A({"role": "tool", "tool_call_id": "call_1", "content": "1. [abc.xyz] Alphabet Q1 results"}),
            A({"role": "assistant", "content": "Cloud revenue was 12.3 billion."}),
        ],
        "parallel": [
            sys,
            user,
            A({"role": "assistant", "content": "Two lookups.", "tool_calls": [search, opened]}),
            A({"role": "tool", "tool_call_id": "call_1", "content": "result one"}),
            A({"role": "tool", "tool_call_id": "call_2", "content": "page two"}),
            A({"role": "assistant", "content": "Both done."}),
        ],
        "follow_up": [
            sys,
            user,
            A({"role": "assistant", "content": "Revenue grew."}),
            A({"role": "user", "content": "And the cloud?"}),
            A({"role": "assistant", "content": "Cloud grew too."}),
        ],
        "reasoning": [
            sys,
            user,
            A(
                {
                    "role": "assistant",
                    "reasoning_content": "first thoughts",
                    "content": "Search.",
                    "tool_calls": [search],
                }
            ),
            A({"role": "tool", "tool_call_id": "call_1", "content": "result"}),
            A({"role": "assistant", "reasoning_content": "second thoughts", "content": "Revenue grew."}),
            A({"role": "user", "content": "Why?"}),
            A({"role": "assistant", "reasoning_content": "third thoughts", "content": "Because."}),
        ],
    }


def calls_in_text(m: Message) -> Message:
    """``m`` with its OpenAI tool calls written into the text as Hermes ``<tool_call>`` blocks (and
    marked so, as the env marks calls it parsed from text): how a model whose template does not
    render ``tool_calls`` writes them."""
    if m.role != "assistant" or not m.tool_calls or m.tool_call_format:
        return m
    blocks = "".join(
        f'\n<tool_call>\n{{"name": "{c.function.name}", "arguments": {c.function.arguments}}}\n</tool_call>'
        for c in m.tool_calls
    )
    return m.model_copy(update={"content": m.text + blocks, "tool_call_format": "hermes"})


def _renders(t: Any, messages: list[dict[str, Any]]) -> bool:
    try:
        t.render(messages, False)
    except TemplateError:
        return False
    return True


def _learn_tool_calls(exp: SelfTested, rep: TemplateReport, convs: dict[str, list[Message]]) -> None:
    """Pick the first tool-call id style the template renders the ``tool`` case with, and find out
    whether it writes OpenAI ``tool_calls`` at all."""
    t = exp.template
    tool_case = convs["tool"]
    for style in ("as_is", "alnum9"):
        t.call_ids = style
        if _renders(t, [message_to_template(m, exp.tool_arguments, style) for m in tool_case]):
            break
    else:
        t.call_ids = "as_is"
    rep.call_id_style = t.call_ids
    if t.call_ids != "as_is":
        rep.notes.append(
            "the template refuses tool-call ids like 'call_1'; the expander writes each id as 9 "
            "alphanumeric characters (the first 9 hex digits of its SHA-1 unless it already has that form)"
        )
    asst = next(m for m in tool_case if m.tool_calls)
    with_calls = message_to_template(asst, exp.tool_arguments, t.call_ids)
    without = {k: v for k, v in with_calls.items() if k != "tool_calls"}
    try:
        text = t.render([*t.ctx_head(), with_calls], False)
    except TemplateError:
        return  # the tool cases fail to render and are skipped with their error
    if text == t.render([*t.ctx_head(), without], False):
        rep.renders_tool_calls = False
        rep.notes.append(
            "the template does not render OpenAI tool_calls: a turn without sampled ids whose calls exist "
            "only as tool_calls is refused (its calls would be lost); the model must write its calls in "
            "the text (tool_format hermes), which the self-test does"
        )


def _probe_append_only(exp: SelfTested, rep: TemplateReport, name: str, msgs: list[Message]) -> None:
    t = exp.template
    tm = [message_to_template(m, exp.tool_arguments, t.call_ids) for m in msgs]
    cache: dict[int, str | TemplateError] = {0: ""}

    def plain(k: int, optional: bool = False) -> str | None:
        """The render of the first k messages. ``optional``: None where the template refuses that
        prefix (a system message alone, with ``tools=`` in Llama 3.1), which no real conversation has."""
        if k not in cache:
            try:
                cache[k] = t.render(tm[:k], False)
            except TemplateError as e:
                cache[k] = e
        got = cache[k]
        if isinstance(got, TemplateError):
            if optional:
                return None
            raise got
        return got

    for k in range(1, len(tm)):
        if tm[k]["role"] != "assistant" and tm[k - 1]["role"] != "assistant":
            continue  # inside a run of non-assistant messages, which the expander renders together
        before = t.render(tm[:k], add_generation_prompt=True) if tm[k]["role"] == "assistant" else plain(k)
        after = plain(k + 1)
        assert before is not None and after is not None  # not optional: a failure raised
        if after.startswith(before):
            continue
        p = next(
            (i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
            min(len(before), len(after)),
        )
        pk = plain(k, optional=True)
        owner = (
            k
            if pk is not None and p >= len(pk)
            else max(i for i in range(k) if (x := plain(i, optional=True)) is not None and len(x) <= p)
        )
        m = msgs[owner]
        if m.role != "assistant":
            raise TemplateError(
                f"the chat template is not append-only: in self-test case {name!r}, adding message {k} "
                f"({msgs[k].role}) changes the text of message {owner} ({m.role}): "
                f"{before[p : p + 40]!r} became {after[p : p + 40]!r}. The expander cannot reproduce such a "
                "history from appended tokens; fix the template or pass a training chat_template."
            )
        if owner == k:
            rep.generation_prompt_differs = True
        elif m.reasoning_content and m.reasoning_content not in after and msgs[k].role == "user":
            rep.strips_reasoning = True
        else:
            rep.rewrites_assistant = True


def run_self_test(exp: SelfTested) -> TemplateReport:
    """Run the matrix; return the report or raise ``TemplateError`` saying why the template fails."""
    t = exp.template
    rep = TemplateReport(assistant_tail=exp.tail, generation_prompt=t.generation_prompt())
    convs = mock_conversations()
    if len(t.ctx_head()) == 1:
        convs = {k: [m for m in v if m.role != "system"] for k, v in convs.items()}
        rep.notes.append("the template refuses a system message; the self-test runs without one")
    _learn_tool_calls(exp, rep, convs)
    if not rep.renders_tool_calls:
        convs = {k: [calls_in_text(m) for m in v] for k, v in convs.items()}
    for name, msgs in list(convs.items()):
        try:
            _probe_append_only(exp, rep, name, msgs)
        except TemplateError as e:
            if "failed to render" not in str(e) or name == "plain":
                raise
            del convs[name]  # a feature this template does not support (parallel calls, tools)
            rep.skipped_cases.append(name)
            rep.notes.append(f"self-test case {name!r} skipped: {e}")
    raw = '{"query":"q1 revenue","k":3}'
    probe = Message.model_validate(
        {"role": "assistant", "content": "x", "tool_calls": [_call(9, "search", raw)]}
    )
    rep.reserialises_tool_json = rep.renders_tool_calls and not t.renders_arguments_verbatim(
        message_to_template(probe, exp.tool_arguments, t.call_ids), [raw]
    )

    stops = template_stop_ids(t)  # the one owner of stop ids, on the template under test
    rep.stop_token_ids = sorted(stops)
    bos = exp.tokenizer.bos_token_id
    prompt = t.render(t.ctx_head(), add_generation_prompt=True)
    default = list(exp.tokenizer(prompt)["input_ids"])
    if isinstance(bos, int) and default[:2] == [bos, bos]:
        rep.double_bos_risk = True
        rep.notes.append(
            "the template writes BOS and the tokenizer adds another by default: a rollout engine must "
            "tokenize rendered prompts with add_special_tokens=False (the expander always does)"
        )
    if exp._given_stops is None:
        exp.stop_ids = frozenset(stops)
    if not stops:
        rep.notes.append("no stop token found: the tail has no special token and the tokenizer has no EOS")

    saved, on_fork = exp.report, exp.on_fork
    exp.report = rep  # forks during the round trips below depend on what was just learnt
    exp.on_fork = "keep"  # a mock that forks (reasoning removed at a follow-up) is expected, not an error
    try:
        for name, msgs in convs.items():
            traj = Trajectory(id=f"selftest-{name}", task_id="selftest", messages=msgs)
            try:
                pieces, _ = exp._plan(traj)
            except TemplateError as e:
                raise TemplateError(f"chat template self-test case {name!r}: {e}") from e
            ids, _, _, _, segments, extra = exp._assemble(pieces)
            row = exp._expand(traj, None, "off", max_len=None)
            diffs = segment_diffs(exp, traj, ids, segments, row.forks, "strict", extra)
            if any(not d.same_text for d in diffs):
                raise TemplateError(
                    f"chat template self-test case {name!r}: the text the expander builds from fixed-context "
                    f"deltas differs from a full render of the conversation. {format_diffs(diffs)}"
                )
            if diffs and not rep.boundary_merges:
                rep.boundary_merges = True
                rep.notes.append(
                    "tokens merge across a turn boundary (same text, different split than one encode of the "
                    f"full render), e.g. {diffs[0].got!r} vs {diffs[0].expected!r}; the expander keeps the "
                    "boundary the inference engine saw, so check='strict' will report these"
                )
            sampled = []
            for turn, m in enumerate(x for x in msgs if x.role == "assistant"):
                ids = row.input_ids[(row.turn_ids == turn) & (row.loss_mask == 1)].tolist()
                sampled.append(
                    m.model_copy(
                        update={"token_ids": ids, "logprobs": [0.0] * len(ids), "finish_reason": "stop"}
                    )
                )
            it = iter(sampled)
            tito = traj.model_copy(
                update={"messages": [next(it) if m.role == "assistant" else m for m in msgs]}
            )
            row2 = exp._expand(tito, None, "off", max_len=None)
            if (
                row2.input_ids.tolist() != row.input_ids.tolist()
                or row2.loss_mask.tolist() != row.loss_mask.tolist()
            ):
                raise TemplateError(
                    f"chat template self-test case {name!r}: splicing sampled ids (stop token included) does "
                    "not reproduce the rendered sequence; the template's end-of-turn cannot be located"
                )
            rep.cases += 1
    finally:
        exp.report, exp.on_fork = saved, on_fork
    return rep
