"""A fake vLLM server on 127.0.0.1 that speaks vLLM's wire format and samples from a real tiny model.

Generation (``POST /v1/completions`` with token-id prompts) samples with agentrl's own batched
sampler (``sample_batch``, seeded per request), so with the same weights and seeds it gives exactly
the tokens and logprobs of the trainer's HF rollout. The weight routes change what it samples from:

- ``/collective_rpc`` ``reload_weights`` re-reads the safetensors in ``model_dir`` (``vllm serve DIR``);
- ``/v1/load_lora_adapter`` loads a peft adapter onto a copy of the base model under a new name;
- the NCCL routes take the tensors that the test's transport "broadcast" (an in-process queue
  standing in for the NCCL data plane) and load them by name.

``script(prompt_ids, body) -> (token_ids, logprobs, finish_reason)`` replaces the model with a
scripted policy (multi-turn tests: an untrained model never calls a tool).

Every request is recorded in ``calls`` as ``(method, path, body)``. Switches emulate servers without
dev mode (``dev_mode=False``), without runtime LoRA updates, without ``return_token_ids``,
older NCCL routes (``nccl_start_finish=False``), and ids without the stop token (``drop_stop_token``).
"""

from __future__ import annotations

import copy
import json
import queue
import random
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch

from agentrl.sampling.generate import sample_batch
from tests.local_http import send_json, start_server


@dataclass
class Sample:
    """One completion as the server reports it: ids, their log-probs, its ``finish_reason``."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


class FakeVLLM:
    """``FakeVLLM(model=..., served_name=..., model_dir=...)``; ``url`` is the server root."""

    def __init__(
        self,
        *,
        model: torch.nn.Module | None = None,
        model_dir: str | Path | None = None,
        served_name: str = "policy",
        version: str = "0.11.0",
        dev_mode: bool = True,
        lora_updating: bool = True,
        token_ids: bool = True,
        nccl_start_finish: bool = True,
        latency_s: float = 0.0,
        script: Any = None,
        drop_stop_token: bool = False,
    ) -> None:
        self.model_dir = Path(model_dir) if model_dir else None
        self.base = model if model is not None else self._read_dir()
        self.base.eval()
        self.served_name = served_name
        self.version = version
        self.dev_mode = dev_mode
        self.lora_updating = lora_updating
        self.token_ids = token_ids
        self.nccl_start_finish = nccl_start_finish
        self.latency_s = latency_s
        self.script = script
        self.drop_stop_token = drop_stop_token
        self.adapters: dict[str, torch.nn.Module] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self.nccl_inbox: queue.Queue[dict[str, torch.Tensor]] = queue.Queue()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()  # one forward at a time (torch modules are not re-entrant)
        self._count = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def _dispatch(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                path = urlparse(self.path).path
                server.calls.append((method, path, body))
                send_json(self, *server.handle(method, path, body))

        self.httpd = start_server(Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def routes(self) -> list[str]:
        """``"METHOD /path"`` of every call but generation and version checks, in order."""
        return [f"{m} {p}" for m, p, _ in self.calls if p not in ("/v1/completions", "/version")]

    def _read_dir(self) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        assert self.model_dir is not None, "give model= or model_dir="
        return AutoModelForCausalLM.from_pretrained(self.model_dir).eval()

    # ---- routes ----------------------------------------------------------------------------------
    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        dev = {
            "/collective_rpc",
            "/reset_prefix_cache",
            "/get_world_size",
            "/init_weight_transfer_engine",
            "/update_weights",
        }
        if not self.nccl_start_finish:
            dev = dev | {"/start_weight_update", "/finish_weight_update"}
        if path in dev and not self.dev_mode:
            return 404, {"detail": "Not Found"}
        if path in ("/start_weight_update", "/finish_weight_update") and not self.nccl_start_finish:
            return 404, {"detail": "Not Found"}
        if path.endswith("_lora_adapter") and not self.lora_updating:
            return 404, {"detail": "Not Found"}
        try:
            if (method, path) == ("GET", "/version"):
                return 200, {"version": self.version}
            if (method, path) == ("POST", "/v1/completions"):
                return self.complete(body)
            if (method, path) == ("POST", "/v1/load_lora_adapter"):
                return self.load_lora(body)
            if (method, path) == ("POST", "/v1/unload_lora_adapter"):
                if body["lora_name"] not in self.adapters:
                    return 404, {
                        "error": {"message": f"The lora adapter '{body['lora_name']}' cannot be found."}
                    }
                del self.adapters[body["lora_name"]]
                return 200, f"Success: LoRA adapter '{body['lora_name']}' removed successfully."
            if (method, path) == ("POST", "/collective_rpc"):
                if body.get("method") != "reload_weights":
                    return 500, {"error": f"worker has no method {body.get('method')!r}"}
                with self._lock:
                    self.base = self._read_dir()
                return 200, {"results": [None]}
            if (method, path) == ("GET", "/get_world_size"):
                return 200, {"world_size": 1}
            if (method, path) == ("POST", "/update_weights"):
                tensors = self.nccl_inbox.get(timeout=30)
                names = body["update_info"]["names"]
                assert list(tensors) == names, "broadcast order differs from update_info.names"
                with self._lock:
                    self.base.load_state_dict(tensors, strict=False)
                return 200, {"message": "Weights updated"}
            if method == "POST" and path in (
                "/reset_prefix_cache",
                "/init_weight_transfer_engine",
                "/start_weight_update",
                "/finish_weight_update",
            ):
                return 200, {}
        except Exception as e:  # the real server answers 500 with the error text
            return 500, {"error": f"{type(e).__name__}: {e}"}
        return 404, {"detail": "Not Found"}

    def load_lora(self, body: dict[str, Any]) -> tuple[int, Any]:
        from peft import PeftModel

        name, path = body["lora_name"], body["lora_path"]
        if name in self.adapters:
            return 400, {"error": {"message": f"The lora adapter '{name}' has already been loaded."}}
        if not Path(path, "adapter_config.json").exists():
            return 400, {"error": {"message": f"No adapter found for {path}"}}
        with self._lock:
            self.adapters[name] = PeftModel.from_pretrained(copy.deepcopy(self.base), path).eval()
        return 200, f"Success: LoRA adapter '{name}' added successfully."

    def complete(self, body: dict[str, Any]) -> tuple[int, Any]:
        import time

        name = body["model"]
        if name == self.served_name:
            model = self.base
        elif name in self.adapters:
            model = self.adapters[name]
        else:
            return 404, {"error": {"message": f"The model `{name}` does not exist.", "code": 404}}
        prompt = body["prompt"]
        if not (isinstance(prompt, list) and all(isinstance(i, int) for i in prompt)):
            return 400, {"error": {"message": "this fake server takes token-id prompts only"}}
        with self._count:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency_s:
                time.sleep(self.latency_s)
            if self.script is not None:
                s = Sample(*self.script(prompt, body))
            else:
                s = self._sample(model, prompt, body)
        finally:
            with self._count:
                self.in_flight -= 1
        return 200, self._response(name, prompt, body, s)

    def _sample(self, model: torch.nn.Module, prompt: list[int], body: dict[str, Any]) -> Sample:
        """What the model samples, and how the server reports it finished: on one of the request's
        stop ids, or cut at ``max_tokens``."""
        stops = set(body.get("stop_token_ids") or [])
        seed = body.get("seed")
        with self._lock:
            (s,) = sample_batch(
                model,
                [prompt],
                seeds=[seed if seed is not None else random.randrange(2**31)],
                stop_ids=stops,
                pad_id=0,
                max_new_tokens=body["max_tokens"],
                temperature=body.get("temperature", 1.0),
                top_p=body.get("top_p", 1.0),
            )
        return Sample(
            s.token_ids, s.logprobs, "stop" if s.token_ids and s.token_ids[-1] in stops else "length"
        )

    def _response(self, name: str, prompt: list[int], body: dict[str, Any], s: Sample) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "text": "",
            "finish_reason": s.finish_reason,
            "stop_reason": s.token_ids[-1] if s.finish_reason == "stop" else None,
        }
        if self.drop_stop_token and s.finish_reason == "stop":  # a server that leaves it out
            s = Sample(s.token_ids[:-1], s.logprobs[:-1], "stop")
        if body.get("logprobs") is not None:
            as_ids = body.get("return_tokens_as_token_ids")
            choice["logprobs"] = {
                "text_offset": list(range(len(s.token_ids))),
                "token_logprobs": s.logprobs,
                "tokens": [f"token_id:{t}" if as_ids else "?" for t in s.token_ids],
                "top_logprobs": [
                    {f"token_id:{t}" if as_ids else "?": lp}
                    for t, lp in zip(s.token_ids, s.logprobs, strict=True)
                ],
            }
        if body.get("return_token_ids") and self.token_ids:
            choice["token_ids"] = s.token_ids
            choice["prompt_token_ids"] = prompt
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(s.token_ids)}
        return {
            "id": "cmpl-fake",
            "object": "text_completion",
            "model": name,
            "choices": [choice],
            "usage": usage,
        }
