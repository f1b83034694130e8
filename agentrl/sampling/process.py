"""The one-step off-policy sampler in a process of its own (``rollout.sampler: process``).

``ProcessSnapshotEngine`` is a rollout engine (``agentrl.sampling.engines.RolloutEngine``) whose
episodes are sampled by a child process: the child holds an ``HFEngine`` on a frozen copy of the
policy, its own env pool, tokenizer and torch threads, and runs the one episode loop
(``agentrl.rollout.episode``) exactly as the in-thread ``HFSnapshotEngine`` does. With
``rollout.staleness: 1`` the trainer's background thread (``agentrl.sampling.overlap``) only waits on
the child's pipe, so sampling and the update no longer share one process's GIL and OpenMP pool.

The copy lives in shared memory (``torch.multiprocessing``): ``after_update`` writes the new
weights into it in place, which the child sees without a transfer. ``OneStepOffPolicy`` calls it
only with no rollout in flight, so a rollout is still sampled by exactly one policy version. The
child is started with ``spawn`` (fork would copy a process whose torch and env threads are
running); it sends each trajectory back as its canonical JSON line. An exception in the child
comes back as one line (``SamplerError``); a child that dies is noticed at once, never waited on.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing.connection as mpc
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.errors import SamplerError
from agentrl.learn.models import frozen_copy
from agentrl.rollout.context import NO_CONTEXT_POLICY, ContextPolicy
from agentrl.rollout.episode import EpisodeSpec
from agentrl.stopping import stop_point, stop_requested
from agentrl.tokens import SamplingSpec
from agentrl.trajectory import Trajectory

__all__ = ["ProcessSnapshotEngine", "SamplerSetup"]


@dataclass(frozen=True)
class SamplerSetup:
    """What the child needs besides the weights (all picklable): the tokenizer and the run's
    sampling spec, the env config and its worker threads, and the child's torch threads (None:
    what it starts with, ``OMP_NUM_THREADS``)."""

    tokenizer: Any
    spec: SamplingSpec
    pad_id: int
    kv_cache_tokens: int
    env_config: dict[str, Any]
    env_workers: int
    threads: int | None
    context: ContextPolicy = NO_CONTEXT_POLICY


class ProcessSnapshotEngine:
    """``HFSnapshotEngine`` in a child process (see the module docstring). ``rollout`` ignores the
    ``envs`` it is given: the child steps envs of its own, made from ``setup.env_config``.

    The child starts at once and imports what it needs (torch, transformers' model code, the env)
    while the trainer goes on setting up and warm-starting; ``prepare`` hands it the weights."""

    def __init__(self, model: torch.nn.Module, setup: SamplerSetup) -> None:
        self.live, self.setup = model, setup
        self.model: torch.nn.Module | None = None  # the shared copy, made by prepare
        ctx = torch.multiprocessing.get_context("spawn")
        self._conn, theirs = ctx.Pipe()
        self._proc: Any = ctx.Process(
            target=_serve, args=(theirs, setup, type(model).__module__), name="agentrl-sampler", daemon=True
        )
        self._proc.start()
        theirs.close()

    def prepare(self) -> None:
        """Copy the live weights into shared memory and hand them to the child, if not done yet."""
        if self.model is None:
            self.model = frozen_copy(self.live).share_memory()
            self._send(("weights", self.model))

    def rollout(self, envs: Sequence[Any], specs: Sequence[EpisodeSpec]) -> list[Trajectory]:
        if self._proc is None:
            raise SamplerError("rollout.sampler process: the sampler was closed")
        self.prepare()
        self._send(("rollout", list(specs)))
        kind, payload = self._receive()
        if kind == "error":
            raise SamplerError(f"rollout.sampler process: {payload}")
        return [Trajectory.from_json(line) for line in payload]

    def after_update(self, model: torch.nn.Module, step: int) -> None:
        """Write ``model``'s weights (as updated at ``step``) into the shared copy, in place."""
        if self.model is None:
            self.live = model
            return
        with torch.no_grad():
            self.model.load_state_dict(model.state_dict())
        if any(p.is_cuda for p in self.model.parameters()):
            torch.cuda.synchronize()  # the copies are queued: the child must not read before they land

    def close(self) -> None:
        """Ask the child to stop and wait for it (stopped by force after 30 s, or at once when the
        process is stopping: the child holds nothing of the run's but the rollout it was asked for)."""
        proc, conn = self._proc, self._conn
        if proc is None:
            return
        self._proc = self._conn = None
        with contextlib.suppress(OSError):  # OSError: the child is gone already
            conn.send(("close", None))
        proc.join(0 if stop_requested() else 30)
        if proc.is_alive():
            proc.terminate()
            proc.join()
        conn.close()

    # ---- internals ---------------------------------------------------------------------------------
    def _send(self, message: tuple[str, Any]) -> None:
        try:
            self._conn.send(message)
        except OSError:
            raise self._died() from None

    def _receive(self) -> tuple[str, Any]:
        """The child's reply; a ``SamplerError`` as soon as the child has exited without one. A stop
        (Ctrl-C, SIGTERM: ``agentrl.stopping``) ends the wait within a tenth of a second."""
        while not mpc.wait([self._conn, self._proc.sentinel], timeout=0.1):
            stop_point()
        try:
            if self._conn.poll():
                return self._conn.recv()
        except (EOFError, OSError):  # the child closed its end by exiting
            pass
        raise self._died()

    def _died(self) -> SamplerError:
        self._proc.join(5)
        code = self._proc.exitcode
        return SamplerError(
            f"rollout.sampler process: the sampler process exited (code {code}) during a rollout; "
            "see its output above, or run with rollout.sampler: thread"
        )


def _serve(conn: Any, setup: SamplerSetup, model_module: str) -> None:
    """The child: import and build what does not need the weights, then answer requests (the
    weights once, rollouts) until told to close."""
    import importlib

    from agentrl.env import ResearchEnv
    from agentrl.sampling.hf import EpisodeLoop, HFEngine

    importlib.import_module(model_module)  # the model's code, before its weights arrive
    if setup.threads is not None:
        torch.set_num_threads(setup.threads)
    expander = setup.spec.expander(setup.tokenizer)
    envs: list[Any] = [ResearchEnv(setup.env_config)]
    engine: HFEngine | None = None
    with cf.ThreadPoolExecutor(max_workers=setup.env_workers, thread_name_prefix="agentrl-env") as pool:
        loop = EpisodeLoop(setup.spec, expander, pool, setup.context)
        while True:
            try:
                kind, payload = conn.recv()
            except EOFError:  # the parent is gone
                return
            if kind == "close":
                return
            if kind == "weights":  # shared memory: the parent's later syncs write into these tensors
                engine = HFEngine(payload, loop, pad_id=setup.pad_id, kv_cache_tokens=setup.kv_cache_tokens)
                continue
            try:
                assert engine is not None, "a rollout before the weights"
                while len(envs) < len(payload):
                    envs.append(ResearchEnv(setup.env_config))
                trajs = engine.rollout(envs, payload)
                conn.send(("ok", [t.to_json() for t in trajs]))
            except Exception as e:  # every failure goes back as one line
                last = traceback.extract_tb(e.__traceback__)[-1]
                where = f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno})"
                first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                conn.send(("error", f"{type(e).__name__}: {first}{where}"))
