"""A policy for the Ray tests, importable by Ray workers (it is pickled by reference)."""

from __future__ import annotations

import asyncio
import os

from agentrl.policy import OraclePolicy


class TroubleOracle(OraclePolicy):
    """The oracle, slowed down by ``delay_s`` per turn on ``slow_task`` and raising on ``fail_task``;
    its name carries the pid of the process it runs in."""

    def __init__(self, slow_task: str, delay_s: float, fail_task: str | None = None):
        super().__init__()
        self.slow_task, self.delay_s, self.fail_task = slow_task, delay_s, fail_task
        self.name = f"oracle@{os.getpid()}"

    async def act(self, messages, ctx):
        if ctx.task_id == self.fail_task:
            raise RuntimeError(f"{ctx.task_id} fails")
        if ctx.task_id == self.slow_task:
            await asyncio.sleep(self.delay_s)
        return await super().act(messages, ctx)
