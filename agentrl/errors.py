"""The one exception hierarchy of agentrl.

Every error that a user can cause (bad files, bad config, bad CLI input) is an ``AgentRLError``;
the CLI prints its message as one line and exits non-zero. Messages name the file, line or field
and what was expected. What agentrl tells without stopping (a torn last line skipped) is an
``AgentRLWarning``: a library user gets a Python warning, the CLI prints it as one ``note:`` line.
"""

from __future__ import annotations

__all__ = [
    "AgentRLError",
    "AgentRLWarning",
    "ConfigError",
    "ForkError",
    "JudgeError",
    "MissingSetting",
    "RubricError",
    "RunInterrupted",
    "SamplerError",
    "SchemaVersionError",
    "TemplateError",
    "TokenCheckError",
    "ToolError",
    "TornLineWarning",
    "TrajectoryFormatError",
]


class AgentRLError(Exception):
    """Base class of every error agentrl raises on purpose."""


class ConfigError(AgentRLError):
    """A config file, CLI argument or input file is malformed or inconsistent."""


class MissingSetting(ConfigError):
    """A library call lacks a setting it needs. Its message names the parameter (``setting``, e.g.
    ``JudgeConfig(model=...)``); the CLI names its own flag instead (``for_flag``), so a Python
    user is never told to pass ``--model`` and a CLI user never told to set a field."""

    def __init__(self, problem: str, setting: str) -> None:
        self.problem, self.setting = problem, setting
        super().__init__(f"{problem}; set {setting}")

    def for_flag(self, flag: str) -> ConfigError:
        return ConfigError(f"{flag}: {self.problem}; give {flag}")


class TrajectoryFormatError(AgentRLError):
    """A stored trajectory line cannot be read (not the torn last line, which is skipped)."""


class SchemaVersionError(TrajectoryFormatError):
    """A stored trajectory has a ``schema_version`` this agentrl does not know."""


class RubricError(AgentRLError):
    """A rubric YAML file is invalid; the message names file:line:column and the field."""


class JudgeError(AgentRLError):
    """The judge could not produce a verdict (after its bounded retries)."""


class ToolError(AgentRLError):
    """A tool backend failed in a way that is not the policy's fault (misconfiguration)."""


class TemplateError(ConfigError):
    """A chat template failed the token expander's self-test (it rewrites history in a way the
    expander cannot handle, or renders in a way it cannot split); the message says why."""


class TokenCheckError(AgentRLError):
    """``check="strict"`` or ``"ignore_whitespace"`` found expanded ids that differ from a full
    render of the conversation; the message lists the differing segments."""


class ForkError(AgentRLError):
    """``on_fork="error"``: the template would rewrite earlier turns of this trajectory, so a
    chat-API rollout showed the model a different history than the appended token sequence."""


class SamplerError(AgentRLError):
    """The rollout sampler's own process (``rollout.sampler: process``) failed or exited; the
    message carries the child's error in one line."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C or SIGTERM (``signal``) after writing what it could (a summary marked
    interrupted); the message says where ``--resume`` goes on from. A ``KeyboardInterrupt``, so that
    code which stops on Ctrl-C stops on it too."""

    def __init__(self, message: str = "", signal: str = "SIGINT") -> None:
        super().__init__(message)
        self.signal = signal


class AgentRLWarning(UserWarning):
    """Base class of every warning agentrl gives on purpose; the CLI prints each as ``note: <message>``."""


class TornLineWarning(AgentRLWarning):
    """The last line of a JSONL file was cut short (a crash mid-write) and was skipped or removed."""
