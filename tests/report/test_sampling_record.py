"""The trainer records its ``SamplingSpec`` in the run (``sampling.json``), and the report, replay and
explain build their expander from it, not from the tokenizer alone."""

from __future__ import annotations

import json

from agentrl.explain.report.tokens import TokenSource
from agentrl.rundir import RunDir
from agentrl.tokens import read_sampling_spec, turn_stop_ids


def test_the_run_records_the_trainers_sampling_spec(real_run):
    from transformers import AutoTokenizer

    from tests.answering_model import answering_model_dir

    run = RunDir(real_run)
    spec = read_sampling_spec(run.sampling_file)
    assert spec is not None
    tok = AutoTokenizer.from_pretrained(str(run.tokenizer_dir))
    cfg = json.loads(run.config_file.read_text())["rollout"]
    assert (spec.max_len, spec.max_new_tokens, spec.temperature, spec.top_p) == (
        cfg["max_len"], cfg["max_new_tokens"], cfg["temperature"], cfg["top_p"],
    )  # fmt: skip
    from transformers import GenerationConfig

    gen = GenerationConfig.from_pretrained(str(answering_model_dir()))
    assert spec.stop_ids == turn_stop_ids(tok, generation_config=gen)


def test_the_trainer_stops_on_its_models_generation_config_eos_and_records_it(tmp_path, monkeypatch):
    """A model whose generation config names an EOS that neither its template nor its tokenizer
    ends turns with: the run's spec, its expander and ``sampling.json`` all have it — from the
    loaded model's config (the file beside the tokenizer is not read here: a resumed run loads
    its tokenizer from the run, where there is none)."""
    import shutil

    import agentrl.tokens.spec as spec_module

    monkeypatch.setattr(spec_module, "saved_generation_config", lambda tokenizer: None)
    from transformers import AutoTokenizer

    from agentrl.train import Trainer
    from tests.answering_model import answering_model_dir
    from tests.train.learning_signal import train_config

    model = tmp_path / "model"
    shutil.copytree(answering_model_dir(), model)
    tok = AutoTokenizer.from_pretrained(str(model))
    extra = next(i for i in sorted(tok.get_added_vocab().values()) if i not in turn_stop_ids(tok))
    gen = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": extra}))
    t = Trainer(train_config(tmp_path, sft_steps=0, **{"model.path": str(model)}), progress=False)
    t.setup()
    try:
        assert (
            extra in t.sampling.stop_ids and extra in t.expander.stop_ids and extra in t.engine.loop.stop_ids
        )
        assert read_sampling_spec(RunDir(t.out).sampling_file) == t.sampling
    finally:
        t.pool.shutdown(wait=False)
        t.judge.close()


def test_the_report_expands_with_the_runs_recorded_spec(run_copy):
    """An id the run stopped on (here one the template never writes) is a stop id of the report's
    expander, and its rows are cut at the run's ``max_len``."""
    run = RunDir(run_copy)
    data = json.loads(run.sampling_file.read_text())
    data["stop_ids"] = sorted({*data["stop_ids"], 5})
    data["max_len"] = 1000
    run.sampling_file.write_text(json.dumps(data))
    exp = TokenSource(run_copy, run.token_files())._get_expander()
    assert exp is not None and set(exp.stop_ids) == set(data["stop_ids"]) and exp.max_len == 1000


def test_replay_and_explain_expand_with_the_runs_recorded_spec(run_copy, monkeypatch):
    """``agentrl replay --tensors`` and ``agentrl explain`` take the run's spec (``max_len`` from the
    run's config, as the trainer had it)."""
    import agentrl.tokens as tokens
    from agentrl.cli import main

    seen = []
    real = tokens.run_expander

    def spy(tokenizer, sampling_file, max_len=None):  # type: ignore[no-untyped-def]
        seen.append((sampling_file, max_len))
        return real(tokenizer, sampling_file, max_len)

    monkeypatch.setattr(tokens, "run_expander", spy)
    run = RunDir(run_copy)
    traj = run.trajectory_files()[1]
    assert main(["replay", str(traj), "--run", str(run_copy), "--tensors", str(run_copy / "t.pt")]) == 0
    assert main(["explain", str(traj), "--run", str(run_copy), "--index", "0"]) == 0
    assert seen == [(run.sampling_file, 2048)] * 2
