"""``agentrl rollout --policy hf:PATH``: a local model samples through the trainer's own engine, its
turns stop on the template's end-of-turn (not only the tokenizer's EOS), and the stored ids and
log-probs are exactly what the sampler produced for the expander's prompt."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.rollout.episode import turn_seed
from agentrl.tokens import Expander, turn_stop_ids
from agentrl.trajectory import read_trajectories
from tests.answering_model import answering_model_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def eos_is_not_end_of_turn(tmp_path_factory) -> Path:
    """The answering model (its turns end with ``<|im_end|>``) with the tokenizer's EOS set to
    ``<|endoftext|>``, as base Qwen has it: stopping on EOS alone never ends a turn."""
    d = tmp_path_factory.mktemp("hf") / "model"
    shutil.copytree(answering_model_dir(), d)
    cfg_file = d / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["eos_token"] = "<|endoftext|>"
    cfg_file.write_text(json.dumps(cfg))
    return d


def _rollout(model: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "agentrl", "rollout", "--policy", f"hf:{model}", "--out", str(out)]
    cmd += ["--limit", "2", "-n", "2", "--max-tokens", "12", "--concurrency", "3", "--no-progress", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_hf_rollout_stops_on_end_of_turn_and_stores_what_the_sampler_drew(eos_is_not_end_of_turn, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.sampling.generate import sample_batch

    out = tmp_path / "r.jsonl"
    env = tmp_path / "env.yaml"  # the prompt the answering model was trained on: short
    env.write_text(json.dumps({"system_prompt": "Today is {date}. Tools: {tools}", "search_k": 2}))
    r = _rollout(eos_is_not_end_of_turn, out, "--device", "cpu", "--config", str(env))
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 4 and summary["turns_without_token_ids"] == 0
    trajs = list(read_trajectories(out))
    tok = AutoTokenizer.from_pretrained(eos_is_not_end_of_turn)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token_id != im_end
    turns = [m for t in trajs for m in t.messages if m.role == "assistant"]
    # The model ends its turns with <|im_end|>: they stop there, and episodes are answered.
    assert all(m.finish_reason == "stop" and m.token_ids[-1] == im_end for m in turns)
    assert all(t.info.get("terminated") for t in trajs)
    assert {t.info["policy"] for t in trajs} == {f"hf:{eos_is_not_end_of_turn}"}

    # What was stored is what the sampler draws from the expander's prompt with the turn's seed.
    model = AutoModelForCausalLM.from_pretrained(eos_is_not_end_of_turn).eval()
    exp = Expander(tok, stop_token_ids=turn_stop_ids(tok, generation_config=model.generation_config))
    for t in trajs:
        first = next(i for i, m in enumerate(t.messages) if m.role == "assistant")
        prompt = exp.generation_prompt_ids(t.messages[:first])
        (s,) = sample_batch(
            model, [prompt], seeds=[turn_seed(t.info["seed"], 0)], stop_ids=set(exp.stop_ids),
            pad_id=tok.pad_token_id, max_new_tokens=12,
        )  # fmt: skip
        stored = t.messages[first]
        assert s.token_ids == stored.token_ids
        assert s.logprobs == pytest.approx(stored.logprobs, abs=1e-5)
        row = exp.expand(t)  # TITO: the row holds the sampled ids as they were drawn
        assert row.input_ids[len(prompt) : len(prompt) + len(s.token_ids)].tolist() == s.token_ids
        assert not exp.diff(t)  # the row equals the template's render of the conversation


def test_trainer_stops_on_the_same_ids(eos_is_not_end_of_turn, tmp_path):
    from agentrl.train import Trainer
    from tests.train.learning_signal import train_config

    t = Trainer(
        train_config(tmp_path, **{"model.path": str(eos_is_not_end_of_turn)}, sft_steps=0), progress=False
    )
    t.setup()
    want = turn_stop_ids(t.tokenizer, generation_config=t.model.generation_config)
    im_end = t.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in want and t.tokenizer.eos_token_id in want
    assert set(t.stop_ids) == set(t.expander.stop_ids) == set(t.engine.loop.stop_ids) == want


def test_hf_policy_errors_are_one_line(tmp_path, capsys):
    from agentrl.cli import main

    def err(model: Path) -> str:
        argv = ["rollout", "--policy", f"hf:{model}", "--out", str(tmp_path / "r.jsonl"), "--limit", "1"]
        assert main([*argv, "--no-progress"]) == 1
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]

    assert "no such directory" in err(tmp_path / "missing")
    assert "neither a transformers directory" in err(tmp_path)


def test_a_trainer_run_loads_as_the_policy_it_trained(tmp_path):
    """``hf:RUN_DIR`` (what ``agentrl train`` writes) is the run's latest checkpoint: the same
    weights and the run's tokenizer, sampled as the run sampled (``_samples_as_the_run``), so a
    user evaluates a checkpoint before and after training."""
    import torch

    from agentrl.learn.policy_model import load_policy_model
    from agentrl.train import Trainer
    from tests.train.learning_signal import train_config

    t = Trainer(train_config(tmp_path, sft_steps=0, **SAMPLING), progress=False)
    t.setup()
    with torch.no_grad():  # weights that differ from the model directory's, as after an update
        next(t.model.parameters()).add_(0.5)
    t.save()
    loaded = load_policy_model(t.out, device="cpu")
    assert loaded.source.endswith("state.pt")
    want, got = t.model.state_dict(), loaded.model.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert loaded.tokenizer.get_vocab() == t.tokenizer.get_vocab()
    _samples_as_the_run(t)


#: A run's sampling settings that differ from the hf: policy's defaults.
SAMPLING = {
    "rollout.context": {"strategy": "drop_observations", "trigger_tokens": 900, "keep_last_turns": 2},
    "rollout.max_len": 1024,
    "rollout.max_new_tokens": 20,
    "rollout.temperature": 0.7,
    "rollout.top_p": 0.9,
    "eval.temperature": 0.5,
}


def _samples_as_the_run(t):
    """``hf:RUN`` samples as the run's evaluation did: the spec it recorded (stop ids, max_len,
    max_new_tokens, top_p; the temperature of ``eval.temperature`` where set) and its
    ``rollout.context`` policy; the arguments override; a transformers directory keeps the
    defaults (512 tokens a turn, temperature 1, no context rewrite)."""
    from agentrl.rollout.context import NO_CONTEXT_POLICY, ContextPolicy
    from agentrl.train.hf_policy import DEFAULT_MAX_TOKENS, load_hf_policy
    from tests.train.learning_signal import TINY

    def loop_of(policy):
        return policy.rollout.__self__.loop

    loop = loop_of(load_hf_policy(t.out, device="cpu"))
    assert loop.context == ContextPolicy("drop_observations", 900, 2)
    assert (loop.spec.max_len, loop.spec.max_new_tokens, loop.spec.top_p) == (1024, 20, 0.9)
    assert loop.spec.temperature == 0.5 and loop.spec.stop_ids == t.sampling.stop_ids
    given = loop_of(load_hf_policy(t.out, device="cpu", temperature=1.3, max_tokens=7, top_p=0.5))
    assert (given.spec.temperature, given.spec.max_new_tokens, given.spec.top_p) == (1.3, 7, 0.5)
    plain = loop_of(load_hf_policy(TINY["model"]["path"], device="cpu"))
    assert plain.context == NO_CONTEXT_POLICY and plain.spec.max_new_tokens == DEFAULT_MAX_TOKENS
    assert (plain.spec.temperature, plain.spec.top_p) == (1.0, 1.0)


def test_the_hf_policy_keeps_the_trainers_default_kv_cache():
    from agentrl.train.config import RolloutConfig
    from agentrl.train.hf_policy import DEFAULT_KV_CACHE_TOKENS

    assert RolloutConfig.model_fields["kv_cache_tokens"].default == DEFAULT_KV_CACHE_TOKENS
