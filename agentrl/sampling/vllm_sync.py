"""Weight sync from the trainer to a running vLLM server, after every optimiser step.

Modes (``vllm.sync``):

- ``lora``: the peft adapter is saved to ``sync_dir/lora-stepNNNNN`` and loaded under a new name
  (``POST /v1/load_lora_adapter``; the server needs ``--enable-lora`` and
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``); generation switches to the new name, then the
  previous adapter is unloaded (``POST /v1/unload_lora_adapter``) and its directory removed. A new
  name per version works on every vLLM of the range: no in-place reload is needed.
- ``full``: the whole model is saved as HF safetensors into ``sync_dir`` (the directory the server
  was started from: ``vllm serve SYNC_DIR``), then ``POST /collective_rpc {"method":
  "reload_weights"}`` reloads it on every worker and ``POST /reset_prefix_cache`` drops KV computed
  with the old weights (both need ``VLLM_SERVER_DEV_MODE=1``).
- ``nccl``: GPU to GPU. Once: ``GET /get_world_size`` and ``POST /init_weight_transfer_engine``
  while the trainer joins the NCCL group as rank 0. Each step: ``POST /start_weight_update`` (where
  the server has it), ``POST /update_weights`` with every parameter's name/dtype/shape while the
  trainer broadcasts them, then ``POST /finish_weight_update`` (or ``/reset_prefix_cache`` where
  the server predates it). Needs ``--weight-transfer-backend nccl`` and the dev mode.
- ``none``: the server's weights are never changed (evaluation, or an external sync).

The HTTP calls are plain and synchronous: the sync runs between rollouts, on one rank.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from agentrl.errors import ConfigError
from agentrl.sampling.vllm_client import VLLMError, server_root

__all__ = ["NcclTransport", "SyncMode", "VLLMNcclTransport", "WeightSync"]

SyncMode = Literal["lora", "full", "nccl", "none"]


class NcclTransport(Protocol):
    """The trainer's side of the NCCL weight transfer (rank 0 of a group with the vLLM workers)."""

    def init(self, master_address: str, master_port: int, world_size: int) -> None:
        """Join the group as rank 0 (blocks until every vLLM worker has joined)."""
        ...

    def broadcast(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Broadcast the tensors, in order, to every vLLM worker."""
        ...


class VLLMNcclTransport:
    """``NcclTransport`` through vLLM's own NCCL weight-transfer engine (needs vllm and a GPU on the
    trainer's machine; imported only when used)."""

    def __init__(self, device: Any = None, packed: bool = True) -> None:
        self.device = device
        self.packed = packed
        self.group: Any = None

    def init(self, master_address: str, master_port: int, world_size: int) -> None:
        try:
            import torch
            from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
            from vllm.distributed.utils import StatelessProcessGroup
        except ImportError as e:
            raise ConfigError(
                f"vllm.sync: nccl needs vllm on the trainer: pip install 'agentrl[gpu]' ({e})"
            ) from None
        pg = StatelessProcessGroup.create(
            host=master_address, port=master_port, rank=0, world_size=world_size
        )
        self.device = self.device or torch.device("cuda")
        self.group = PyNcclCommunicator(pg, device=self.device)

    def broadcast(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

        device = self.device
        NCCLWeightTransferEngine.trainer_broadcast_weights(
            iterator=((n, t.to(device)) for n, t in named_tensors), group=self.group, packed=self.packed
        )


class WeightSync:
    """Pushes the trainer's weights to the server: ``push(model, step)`` (see the module docstring).

    ``model`` is a transformers model (a peft model in ``lora`` mode). ``served_model`` is the name
    generation requests must use after the last push (it changes in ``lora`` mode). ``tokenizer``
    is saved next to full weights once, so ``vllm serve SYNC_DIR`` finds it. ``nccl_transport``
    replaces vLLM's NCCL engine (tests use a recording one).
    """

    def __init__(
        self,
        mode: SyncMode,
        base_url: str,
        served_model: str,
        *,
        sync_dir: str | Path | None = None,
        lora_name: str = "agentrl-policy",
        tokenizer: Any = None,
        timeout_s: float = 600.0,
        api_key: str | None = None,
        nccl_master: tuple[str, int] = ("127.0.0.1", 29555),
        nccl_transport: NcclTransport | None = None,
    ) -> None:
        if mode in ("lora", "full") and not sync_dir:
            raise ConfigError(f"vllm.sync_dir: sync mode {mode!r} needs a directory the server can read")
        self.mode = mode
        self.root = server_root(base_url)
        self.served_model = served_model
        self.sync_dir = Path(sync_dir) if sync_dir else None
        self.lora_name = lora_name
        self.tokenizer = tokenizer
        self.nccl_master = nccl_master
        self.transport = nccl_transport
        self.calls: list[str] = []  # "METHOD /route" of every request made, in order
        self._lora_dir: Path | None = None
        self._nccl_ready = False
        self._saved_tokenizer = False
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)), headers=headers
        )

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def _call(self, method: str, path: str, body: Any = None, *, missing_ok: bool = False) -> Any:
        self.calls.append(f"{method} {path}")
        try:
            resp = self._http.request(method, self.root + path, json=body)
        except httpx.TransportError as e:
            raise VLLMError(f"{method} {self.root}{path}: {type(e).__name__}: {e}") from None
        if resp.status_code == 404 and missing_ok:
            return None
        if resp.status_code == 404:
            raise VLLMError(f"{method} {self.root}{path}: HTTP 404: {_HINTS.get(path, 'no such route')}")
        if resp.status_code >= 400:
            raise VLLMError(f"{method} {self.root}{path}: HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            return resp.json() if resp.content else {}
        except ValueError:
            return {}

    # ---- the three transports ----------------------------------------------------------------------
    def push(self, model: Any, step: int, state_dict: dict[str, Any] | None = None) -> str:
        """Make the server serve ``model``'s current weights (version ``step``); returns the served
        model name generation must use from now on. ``state_dict`` (full, unsharded tensors)
        replaces the model's own parameters, for models whose parameters are shards (FSDP)."""
        if self.mode == "lora":
            self._push_lora(model, step)
        elif self.mode == "full":
            self._push_full(model, state_dict)
        elif self.mode == "nccl":
            self._push_nccl(model, step, state_dict)
        return self.served_model

    def _push_lora(self, model: Any, step: int) -> None:
        if not hasattr(model, "peft_config"):
            raise ConfigError("vllm.sync: lora needs a LoRA policy (model.lora_rank > 0)")
        assert self.sync_dir is not None
        path = self.sync_dir / f"lora-step{step:05d}"
        if path.exists():
            shutil.rmtree(path)
        model.save_pretrained(str(path))
        name = f"{self.lora_name}-step{step:05d}"
        load = {"lora_name": name, "lora_path": str(path.resolve())}
        try:
            self._call("POST", "/v1/load_lora_adapter", load)
        except VLLMError as e:
            if "HTTP 400" not in str(e) or "already" not in str(e):
                raise
            # A resumed run meets the adapter it loaded before it stopped: replace it.
            self._call("POST", "/v1/unload_lora_adapter", {"lora_name": name})
            self._call("POST", "/v1/load_lora_adapter", load)
        old, old_dir = self.served_model, self._lora_dir
        self.served_model, self._lora_dir = name, path
        if old_dir is not None:  # a previously loaded adapter, not the base model
            self._call("POST", "/v1/unload_lora_adapter", {"lora_name": old})
            if old_dir != path:
                shutil.rmtree(old_dir, ignore_errors=True)

    def _push_full(self, model: Any, state_dict: dict[str, Any] | None) -> None:
        if hasattr(model, "peft_config"):
            raise ConfigError("vllm.sync: full reloads whole models; a LoRA policy syncs with sync: lora")
        assert self.sync_dir is not None
        self.sync_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(self.sync_dir), state_dict=state_dict, safe_serialization=True)
        if self.tokenizer is not None and not self._saved_tokenizer:
            self.tokenizer.save_pretrained(str(self.sync_dir))
            self._saved_tokenizer = True
        self._call("POST", "/collective_rpc", {"method": "reload_weights"})
        self._call("POST", "/reset_prefix_cache")

    def _push_nccl(self, model: Any, step: int, state_dict: dict[str, Any] | None) -> None:
        if hasattr(model, "peft_config"):
            raise ConfigError("vllm.sync: nccl sends whole models; a LoRA policy syncs with sync: lora")
        if self.transport is None:
            self.transport = VLLMNcclTransport()
        params = list(state_dict.items()) if state_dict is not None else list(model.named_parameters())
        if not self._nccl_ready:
            size = self._call("GET", "/get_world_size")
            world = int(size["world_size"]) + 1  # the vLLM workers and the trainer (rank 0)
            host, port = self.nccl_master
            info = {"master_address": host, "master_port": port, "rank_offset": 1, "world_size": world}
            # The server's init blocks until the trainer has joined the group: run both at once.
            self._concurrently(
                lambda: self._call("POST", "/init_weight_transfer_engine", {"init_info": info}),
                lambda: self.transport.init(host, port, world),  # type: ignore[union-attr]
            )
            self._nccl_ready = True
        started = self._call("POST", "/start_weight_update", missing_ok=True)
        update = {
            "names": [n for n, _ in params],
            "dtype_names": [str(p.dtype).removeprefix("torch.") for _, p in params],
            "shapes": [list(p.shape) for _, p in params],
            "packed": True,
        }
        self._concurrently(
            lambda: self._call("POST", "/update_weights", {"update_info": update}),
            lambda: self.transport.broadcast((n, p.detach()) for n, p in params),  # type: ignore[union-attr]
        )
        if started is not None:
            self._call("POST", "/finish_weight_update", {"weight_version": str(step)})
        else:  # an older server: no start/finish pair, drop the prefix cache ourselves
            self._call("POST", "/reset_prefix_cache")

    @staticmethod
    def _concurrently(server_side: Any, trainer_side: Any) -> None:
        errors: list[BaseException] = []

        def run() -> None:
            try:
                server_side()
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        trainer_side()
        t.join()
        if errors:
            raise errors[0]


_HINTS = {
    "/v1/load_lora_adapter": "start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
    "/v1/unload_lora_adapter": "start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
    "/collective_rpc": "start vLLM with VLLM_SERVER_DEV_MODE=1 (full sync reloads through collective_rpc)",
    "/reset_prefix_cache": "start vLLM with VLLM_SERVER_DEV_MODE=1",
    "/get_world_size": "this vLLM has no NCCL weight-transfer routes: use sync: full, or a vLLM that has "
    "them started with --weight-transfer-backend nccl and VLLM_SERVER_DEV_MODE=1",
    "/init_weight_transfer_engine": "start vLLM with --weight-transfer-backend nccl and VLLM_SERVER_DEV_MODE=1",
    "/update_weights": "start vLLM with --weight-transfer-backend nccl and VLLM_SERVER_DEV_MODE=1",
}
