"""``ResearchEnv``: the deep-research environment (gymnasium), registered as ``agentrl/DeepResearch-v0``.

One episode is one task. ``reset`` returns the prompt; each ``step`` takes one assistant turn,
runs the tool calls in it and returns their output as the observation. The env owns the outcome:
the first valid ``answer`` call terminates the episode and is its report (reward = the task's
rubric score; NaN when the judge failed); a turn cut at the token limit is never a report; an
episode truncated when a budget runs out (reason in ``info["truncated_reason"]``) is
``unanswered``. ``trajectory()`` records the outcome (``info["status"]``, ``info["report"]``) that
``Trajectory.final_report()`` and the judge read back. A broken call never raises: it becomes an
error observation that repeats the right format, and is counted in ``info``.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import math
import threading
import time
from typing import Any, ClassVar

import gymnasium

from agentrl.env.backends import Page, ToolFailure, make_backends
from agentrl.env.config import EnvConfig, load_env_config, merge_env_config
from agentrl.env.parser import FOREIGN_FORMATS, parse_turn
from agentrl.env.reward import is_deterministic, rubric_for, score_report, score_trajectory_llm, turn_credit
from agentrl.env.spaces import FreeText
from agentrl.env.suite import Task, load_suite
from agentrl.env.tools import (
    TOOL_NAMES,
    TOOL_SCHEMAS,
    ArgError,
    check_args,
    format_help,
    render_page,
    render_search,
    system_prompt,
)
from agentrl.errors import ConfigError, RubricError
from agentrl.stopping import in_background, wait
from agentrl.trajectory import FunctionCall, Message, RewardBreakdown, ToolCall, Trajectory
from agentrl.trajectory.outcome import ANSWERED, RUNNING, UNANSWERED, unanswered_reward
from agentrl.trajectory.tools import TOOLS

__all__ = ["ResearchEnv"]

#: Web tool calls in flight at once in this process (more wait for a slot, inside their timeout).
_TOOL_SLOTS = threading.BoundedSemaphore(32)
_COUNTERS = (
    "tool_calls",
    "format_errors",
    "unknown_tools",
    "arg_errors",
    "tool_errors",
    "injected_faults",
    "tool_timeouts",
    "obs_truncations",
    "calls_after_answer",
    "cut_turns",
)
_CUT = "this turn reached the token limit before it ended"


class ResearchEnv(gymnasium.Env[str, str]):
    """A deep-research episode over a suite: tools ``search``, ``open_url`` and ``answer``.

    ``config`` is an ``env.yaml`` mapping (or ``EnvConfig``, or a path); the suite's own
    ``env.yaml`` supplies defaults under it. ``reset(options={"task": id_or_task})`` picks the
    task (a seeded random one when absent).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self, config: dict[str, Any] | EnvConfig | str | None = None, render_mode: str | None = None
    ):
        first = load_env_config(config)
        self.suite = load_suite(first.suite)
        user = (
            first.model_dump(exclude_unset=True)
            if isinstance(config, EnvConfig)
            else (config if isinstance(config, dict) else first.model_dump(exclude_unset=True))
        )
        self.config = load_env_config(
            merge_env_config(self.suite.defaults, user), source=f"{self.suite.root}/env.yaml + config"
        )
        if self.config.judge == "inline" and not self.config.judge_model:
            raise ConfigError(
                f"{self.suite.root}/env.yaml + config: judge: inline needs judge_model (a litellm model)"
            )
        self._search, self._fetch, self._cache = make_backends(self.config, self.suite)
        # Local backends (the sandbox index, a replay file) answer in microseconds: calling them
        # directly saves a thread hop per tool call. Only network backends need the timeout thread.
        self._local_tools = self.config.cache.mode == "replay" or (
            self.config.search.backend == "sandbox" and self.config.fetch.backend == "sandbox"
        )
        self.observation_space = FreeText()
        self.action_space = FreeText()
        self.render_mode = render_mode
        self.tools = TOOL_SCHEMAS
        # Chat policies send ``tools`` (function calling) when this says so (EpisodeContext.send_tools).
        send = self.config.send_tools
        self.send_tools = self.config.tool_format == "openai" if send is None else send
        self.task: Task | None = None
        self.messages: list[Message] = []
        self._done = True

    @property
    def tasks(self) -> list[Task]:
        """The tasks of the configured split (``config.split``) that resets draw from and rollouts run."""
        return self.suite.tasks_in(self.config.split)

    # ---- gymnasium API -------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode; the observation is the system prompt and the task, as one text."""
        super().reset(seed=seed)
        # A reset that fails (an unknown task, a rubric the judge cannot score) ends the episode in
        # progress and changes nothing else: step() then asks for a reset, and the next reset starts clean.
        self._done = True
        options = options or {}
        if options.get("task") is not None:
            task = self.suite.task(options["task"])
        else:
            tasks = self.tasks
            task = tasks[int(self.np_random.integers(0, len(tasks)))]
        where = task.rubric if isinstance(task.rubric, str) else f"task {task.id}"
        rubric = rubric_for(self.suite.rubric_data(task), source=str(where))
        if self.config.judge == "deterministic" and not is_deterministic(rubric):
            llm = ", ".join(c.id for c in rubric.criteria if c.is_llm)
            raise ConfigError(
                f"task {task.id}: rubric {rubric.id!r} has LLM criteria ({llm}) but the env's "
                "judge is 'deterministic'; set judge: deferred (score later with agentrl judge) "
                "or judge: inline with a judge_model"
            )
        self.task, self.rubric = task, rubric
        system = system_prompt(self.config.tool_format, self.task.date, self.config.system_prompt)
        self.messages = [
            Message(role="system", content=system),
            Message(role="user", content=self.task.prompt),
        ]
        self.counts = dict.fromkeys(_COUNTERS, 0)
        self.turns = 0
        self.chars = len(system) + len(self.task.prompt)
        self.tool_log: list[dict[str, Any]] = []
        self.reward_breakdown: RewardBreakdown | None = None
        self.truncated_reason: str | None = None
        self.report: str | None = None
        self.needs_judge = False
        self.reward_status: str | None = None
        self._started = time.monotonic()
        self._done = False
        info = {
            "messages": [m.model_dump(exclude_none=True) for m in self.messages],
            "task_id": self.task.id,
            "date": self.task.date,
            "tools": self.tools,
        }
        return f"{system}\n\n{self.task.prompt}", info

    def step(self, action: str | Message | dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One assistant turn → (tool output text, reward, terminated, truncated, info).

        The first valid ``answer`` call ends the episode and is the report; the calls before it in
        the turn are run, the calls after it are not (counted in ``info["calls_after_answer"]``).
        A turn with no call at all is the report, unless the token limit cut it
        (``finish_reason == "length"``): a cut turn is never a report, its answer is refused with an
        error observation and the episode goes on. A call in another model family's format is run
        with ``tool_format: auto`` and otherwise answered with a format error. ``reward`` is NaN when
        the inline judge failed (``info["reward_status"] == "judge_error"``).
        """
        if not isinstance(action, str | Message | dict):
            # None or a number is a caller's bug, not the policy's text: refused, the episode unchanged.
            raise gymnasium.error.InvalidAction(
                f"step(action): the action is the assistant's turn as text (str), a Message or a message "
                f"dict; got {type(action).__name__} {action!r:.40}"
            )
        if self._done or self.task is None:
            raise gymnasium.error.ResetNeeded("call reset() before step() (the episode is over)")
        self.turns += 1
        msg = self._as_message(action)
        # A message dict whose tool_calls do not validate is kept as text; the parser says what is wrong.
        broken = isinstance(action, dict) and msg.tool_calls is None and bool(action.get("tool_calls"))
        parsed = parse_turn(action if broken else msg, turn_index=self.turns)
        foreign = parsed.format in FOREIGN_FORMATS and self.config.tool_format != "auto"
        cut = msg.finish_reason == "length"
        self.counts["cut_turns"] += cut
        if parsed.calls and not msg.tool_calls and not foreign:
            # Calls written in the text: keep ``content`` exactly as sampled and add the env's parse as
            # OpenAI ``tool_calls`` (marked with the format), so the judge and viewers read the answer.
            msg = msg.model_copy(
                update={
                    "tool_calls": [
                        ToolCall(
                            id=c.id, function=FunctionCall(name=c.name, arguments=json.dumps(c.arguments))
                        )
                        for c in parsed.calls
                    ]
                }
            )
            msg.tool_call_format = parsed.format  # type: ignore[attr-defined]
        self.messages.append(msg)
        self.chars += len(msg.text)
        outputs: list[Message] = []
        report: str | None = None
        budget_hit: str | None = None

        def out(call_id: str, name: str, text: str) -> None:
            if len(text) > self.config.budgets.max_obs_chars:
                self.counts["obs_truncations"] += 1
                cut = len(text) - self.config.budgets.max_obs_chars
                text = text[: self.config.budgets.max_obs_chars] + f"\n[... truncated: {cut} more characters]"
            outputs.append(Message(role="tool", tool_call_id=call_id, name=name, content=text))

        help_line = format_help("search_r1" if parsed.format == "search_r1" else self.config.tool_format)
        calls, errors = ([], []) if foreign else (parsed.calls, parsed.errors)
        if foreign:
            self.counts["format_errors"] += 1
            out(
                f"call_{self.turns}_err0",
                "error",
                f"Error: this turn writes its tool call as {FOREIGN_FORMATS[parsed.format]}, which this env "
                f"does not read (tool_format: {self.config.tool_format}); nothing was run. {help_line}",
            )
        for i, err in enumerate(errors):
            self.counts["format_errors"] += 1
            out(f"call_{self.turns}_err{i}", "error", f"Error: {err.message}. {help_line}")
        for k, call in enumerate(calls):
            if call.name not in TOOL_NAMES:
                self.counts["unknown_tools"] += 1
                out(call.id, call.name, f"Error: unknown tool {call.name!r}. {help_line}")
                continue
            try:
                args = check_args(call.name, call.arguments, self.config.search_k)
            except ArgError as e:
                self.counts["arg_errors"] += 1
                out(call.id, call.name, f"Error: bad arguments for {call.name}: {e}. {help_line}")
                continue
            if TOOLS[call.name].role == "answer":
                if cut:
                    out(call.id, call.name, f"Error: {_CUT}; its answer is not taken. Answer again.")
                    continue
                report = args["report"]
                self.counts["calls_after_answer"] += len(calls) - k - 1
                break
            if budget_hit or self.counts["tool_calls"] >= self.config.budgets.max_tool_calls:
                budget_hit = "max_tool_calls"  # not run; an answer later in the turn still counts
                continue
            self.counts["tool_calls"] += 1
            out(call.id, call.name, self._run_tool(call.name, args))
        if not calls and not errors and not foreign:
            if cut:
                out(
                    f"call_{self.turns}_cut", "error", f"Error: {_CUT}; it is not a final answer. {help_line}"
                )
            else:
                report = msg.text  # a whole turn without any tool call is the final answer

        self.messages.extend(outputs)
        self.chars += sum(len(m.text) for m in outputs)
        if self.config.tool_format == "search_r1" or parsed.format == "search_r1":
            obs = "\n".join(f"<information>{m.text}</information>" for m in outputs)
        else:
            obs = "\n\n".join(m.text for m in outputs)

        reward, terminated = 0.0, False
        if report is not None:
            terminated = self._done = True
            self.report = report
            reward = self._score(report)
        elif budget_hit is not None:
            self.truncated_reason = budget_hit
        elif self.turns >= self.config.budgets.max_turns:
            self.truncated_reason = "max_turns"
        elif self.chars > self.config.budgets.max_total_chars:
            self.truncated_reason = "max_total_chars"
        truncated = self.truncated_reason is not None
        self._done = terminated or truncated
        info = {
            "messages": [m.model_dump(exclude_none=True) for m in outputs],
            **self.counts,
            "turn": self.turns,
            "truncated_reason": self.truncated_reason,
            "tool_format": parsed.format,
            "status": self._status(),
        }
        if terminated:
            info["reward_breakdown"] = (
                None if self.reward_breakdown is None else self.reward_breakdown.model_dump()
            )
            info["needs_judge"] = self.needs_judge
            info["reward_status"] = self.reward_status
        elif truncated:
            info["reward_status"] = UNANSWERED
        return obs, reward, terminated, truncated, info

    def render(self) -> str | None:
        """The conversation so far as text (``render_mode="ansi"``)."""
        if self.render_mode != "ansi":
            return None
        return "\n\n".join(f"[{m.role}] {m.text}" for m in self.messages)

    # ---- episode record ------------------------------------------------------------------
    def trajectory(self, id: str | None = None, *, stop_reason: str | None = None) -> Trajectory:
        """The episode so far as a ``Trajectory``.

        ``info["status"]`` is ``answered`` (``info["report"]`` is the report, ``reward`` its score
        once scored), ``unanswered`` (the episode is over without a report: reward 0 with the
        reason, ``unanswered_reward``) or ``running``. ``stop_reason`` ends the episode from
        outside (a driver that stopped it, such as ``generation_limit`` or ``max_len``); it becomes
        the ``truncated_reason`` of an episode that gave no report.
        """
        assert self.task is not None, "reset() first"
        if stop_reason is not None and self.report is None:
            self.truncated_reason = self.truncated_reason or stop_reason
            self._done = True
        status = self._status()
        reward = unanswered_reward(self.truncated_reason) if status == UNANSWERED else self.reward_breakdown
        info = {
            "suite": str(self.suite.root),
            "date": self.task.date,
            "family": self.task.family,
            "turns": self.turns,
            **self.counts,
            "terminated": self.report is not None,
            "status": status,
            "report": self.report,
            "truncated_reason": self.truncated_reason,
            "needs_judge": self.needs_judge,
            "tool_log": self.tool_log,
            "elapsed_s": round(time.monotonic() - self._started, 4),
            # The task's rubric travels with the trajectory, so ``agentrl judge`` and replays need no suite.
            "rubric": self._rubric_mapping(),
        }
        traj = Trajectory(
            id=id or self.task.id,
            task_id=self.task.id,
            messages=list(self.messages),
            reward=reward,
            info=info,
        )
        if self.config.turn_credit == "evidence":  # what each turn earned; record_reward keeps it current
            traj.info["turn_credit"] = turn_credit(traj, self.rubric)
        return traj

    def _rubric_mapping(self) -> dict[str, Any]:
        assert self.task is not None
        data = self.suite.rubric_data(self.task)
        if isinstance(data, dict):
            return data
        from agentrl.yamlload import indexed, load_yaml

        source = str(self.suite.root / str(self.task.rubric))
        return load_yaml(data, source, error=RubricError, name=indexed)[0]

    def close(self) -> None:
        """Nothing to release per env: backends and caches are shared per process."""

    # ---- internals -------------------------------------------------------------------------
    @staticmethod
    def _as_message(action: str | Message | dict[str, Any]) -> Message:
        if isinstance(action, Message):
            return action
        if isinstance(action, dict):
            try:
                return Message.model_validate({**action, "role": "assistant"})
            except Exception:  # keep the turn; the parser reports what is wrong
                return Message(role="assistant", content=str(action.get("content") or ""))
        return Message(role="assistant", content=str(action))

    def _status(self) -> str:
        return ANSWERED if self.report is not None else UNANSWERED if self._done else RUNNING

    def _score(self, report: str) -> float:
        """The step reward of the report; sets ``reward_status`` (``scored``, ``needs_judge``,
        ``judge_error``). A failed judge is NaN, never a number that could pass for a score."""
        assert self.task is not None
        episode = self.trajectory()  # what the agent did: evidence graders read it
        bd = score_report(self.rubric, report, prompt=self.task.prompt, trajectory=episode)
        if bd is None and self.config.judge == "inline":
            try:
                bd = score_trajectory_llm(
                    episode,
                    self.rubric,
                    model=self.config.judge_model or "",
                    api_base=self.config.judge_api_base,
                )
            except Exception as e:  # the judge's own failures are judge_error; so is anything else it raises
                bd = RewardBreakdown(total=None, status="judge_error", error=f"{type(e).__name__}: {e}")
        if bd is None:
            self.needs_judge, self.reward_status = True, "needs_judge"
            return 0.0
        self.reward_breakdown = bd
        if bd.status == "judge_error" or bd.total is None:
            self.reward_status = "judge_error"
            return math.nan
        self.reward_status = "scored"
        return float(bd.total)

    def _run_tool(self, name: str, args: dict[str, Any]) -> str:
        assert self.task is not None
        t0 = time.monotonic()
        entry: dict[str, Any] = {"turn": self.turns, "tool": name, "args": args}
        try:
            if self.config.tool_error_rate > 0 and self.np_random.random() < self.config.tool_error_rate:
                self.counts["injected_faults"] += 1
                raise ToolFailure("the tool is temporarily unavailable (injected fault); try again")
            if self._local_tools:
                text = self._tool_result(name, args)
            else:
                # A daemon thread, waited on with stop points: a stop does not wait for a web server
                # that answers late (agentrl.stopping).
                fut = in_background(self._slotted_tool, name, args, name="agentrl-tool")
                try:
                    text = wait(fut, timeout=self.config.budgets.tool_timeout_s)
                except cf.TimeoutError:
                    self.counts["tool_timeouts"] += 1
                    raise ToolFailure(
                        f"{name} timed out after {self.config.budgets.tool_timeout_s:g}s"
                    ) from None
            entry["ok"] = True
            return text
        except ToolFailure as e:
            self.counts["tool_errors"] += 1
            entry["ok"], entry["error"] = False, str(e)
            return f"Error: {e}"
        finally:
            entry["seconds"] = round(time.monotonic() - t0, 4)
            self.tool_log.append(entry)

    def _slotted_tool(self, name: str, args: dict[str, Any]) -> str:
        with _TOOL_SLOTS:
            return self._tool_result(name, args)

    def _tool_result(self, name: str, args: dict[str, Any]) -> str:
        assert self.task is not None
        before = self.task.day
        scope = {"world": self.task.world} if self.task.world is not None else {}  # the task's web alone
        if TOOLS[name].role == "search":

            def run_search() -> dict[str, Any]:
                if self._search is None:
                    raise ToolFailure("no search backend is configured")
                return {
                    "hits": [
                        h.to_dict()
                        for h in self._search.search(args["query"], args["k"], before=before, **scope)
                    ]
                }

            sargs = {"query": args["query"], "k": args["k"], **scope}
            res = (
                self._cache.call("search", sargs, before, run_search)
                if self._cache is not None
                else run_search()
            )
            from agentrl.env.backends.base import Hit

            return render_search(args["query"], [Hit(**h) for h in res["hits"]])

        def run_fetch() -> dict[str, Any]:
            if self._fetch is None:
                raise ToolFailure("no fetch backend is configured")
            return self._fetch.fetch(args["url"], before=before, **scope).to_dict()

        fargs = {"url": args["url"], **scope}
        res = self._cache.call("fetch", fargs, before, run_fetch) if self._cache is not None else run_fetch()
        return render_page(Page(**res), args["page"], self.config.page_chars)
