"""The research base's recipe (``agentrl.train.research_base``): the env it learns in is the
quickstart suite's, its worlds name no company of any example world, its first steps are the ones
it made, and what it saves reads back as it was trained (weights and tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agentrl.env.sandbox import excluded_stems
from agentrl.env.sandbox.world import make_world, sandbox_stems
from agentrl.errors import ConfigError
from agentrl.rundir import file_digest
from agentrl.train.research_base import ENV, Recipe, example_stems, export_llama, pretrain, save_base
from agentrl.yamlload import load_yaml

ROOT = Path(__file__).resolve().parents[2]
#: The shipped base (``base:research-tiny``) and its model card: the script in the repository made them.
SHIPPED = ROOT / "agentrl" / "learn" / "base_models" / "research-tiny"


def test_the_env_is_the_quickstart_suites():
    text = (ROOT / "examples" / "quickstart-env" / "env.yaml").read_text(encoding="utf-8")
    assert load_yaml(text, "env.yaml", error=ConfigError)[0] == ENV


def test_every_example_world_is_one_the_base_excludes():
    # each sandbox.yaml the repository ships builds a world whose companies are among example_stems,
    # so adding an example with another seed or more companies fails here until EXAMPLE_WORLDS has it
    # (a world of syllable names instead names no company the base's data can: it draws sandbox names)
    excluded = example_stems()
    specs = sorted([*ROOT.glob("examples/**/sandbox.yaml"), *ROOT.glob("envs/**/sandbox.yaml")])
    assert len(specs) >= 4
    for spec in specs:
        data = load_yaml(spec.read_text(encoding="utf-8"), str(spec), error=ConfigError)[0]
        n = int(data.get("companies", 50)) * int(data.get("worlds", 1)) + int(
            data.get("heldout_companies", 0)
        )
        names = data.get("names", "sandbox")
        exclude = excluded_stems([tuple(w) for w in data.get("exclude_worlds", [])])
        stems = {c.name.split()[0] for c in make_world(int(data.get("seed", 0)), n, names, exclude)}
        if names == "syllables":
            assert not stems & sandbox_stems(), spec
        else:
            assert stems <= excluded, (spec, sorted(stems - excluded))


def test_the_worlds_name_no_example_company(monkeypatch):
    import agentrl.train.research_base as rb

    asked = []
    monkeypatch.setattr(rb, "world_episodes", lambda *a, **k: asked.append((a, k)) or [])
    rb.Worlds(Recipe()).episodes(7)
    ((args, kwargs),) = asked
    assert args[4] == "sandbox" and args[5] == example_stems() and not kwargs
    # and a world drawn so shares no stem with them, over thousands of companies
    stems = {c.name.split()[0] for c in make_world(7, 2000, "sandbox", example_stems())}
    assert len(stems) == 2000 and not stems & example_stems()


def test_a_step_adds_copy_drills_of_the_worlds_it_drew(monkeypatch):
    import random

    import agentrl.train.research_base as rb
    from tests.train.test_copying import _episode

    monkeypatch.setattr(
        rb, "world_episodes", lambda seed, *a, **k: [_episode(10 * seed), _episode(10 * seed + 1)]
    )
    r = Recipe(worlds=3, batch=8, batch_worlds=2, drills=4)
    picked = rb.Worlds(r).batch(random.Random(5))
    episodes, drills = picked[:4] + picked[6:10], picked[4:6] + picked[10:]
    assert all(t.id.endswith("-drill") for t in drills) and not any(t.id.endswith("-drill") for t in episodes)
    # each world's drills come after its episodes, from the same world
    for k in (0, 1):
        world = {int(t.id.removeprefix("ep")) // 10 for t in episodes[4 * k : 4 * k + 4]}
        drilled = {
            int(t.id.removeprefix("ep").removesuffix("-drill")) // 10 for t in drills[2 * k : 2 * k + 2]
        }
        assert len(world) == 1 and drilled == world
    # without drills: the episodes alone, the first world's drawn as before
    plain = rb.Worlds(Recipe(worlds=3, batch=8, batch_worlds=2, drills=0)).batch(random.Random(5))
    assert len(plain) == 8 and [t.id for t in plain[:4]] == [t.id for t in episodes[:4]]


def _card() -> dict:
    return json.loads((SHIPPED / "card.json").read_text(encoding="utf-8"))


def test_the_shipped_weights_are_the_cards():
    card = _card()
    assert file_digest(SHIPPED / "model.safetensors")[1] == card["sha256"]["model.safetensors"]
    # the recipe's defaults are the shipped base's recipe, so `--out DIR` alone remakes it
    assert card["recipe"] == Recipe().to_json() and card["steps_run"] == Recipe().steps
    # what the card promises: the copy head reads names and figures of companies it never saw
    assert json.loads((SHIPPED / "config.json").read_text(encoding="utf-8"))["model_type"] == "agentrl_copy"
    assert card["heldout_copy"]["first_figure"] >= 0.9 and card["heldout_copy"]["figures"] >= 0.9
    assert (SHIPPED / "model.safetensors").stat().st_size < 16 * 2**20


@pytest.mark.slow
def test_the_first_steps_are_the_cards():
    card = _card()
    threads = torch.get_num_threads()
    try:
        rerun = pretrain(
            Recipe(**card["recipe"]), None, threads=card["threads"], stop_after=3, log=lambda _: None
        )
    finally:
        torch.set_num_threads(threads)
    # the same worlds, tokenizer, initial weights and batches; kernels (AVX2 or AVX-512) change
    # float sums in the last digits only
    assert rerun["first_losses"] == pytest.approx(card["first_losses"][:3], rel=1e-4)


def test_what_is_saved_reads_back_as_trained(tmp_path):
    # saved as Qwen2, AutoTokenizer built Qwen2's own tokenizer class, which swaps in its own
    # pre-tokenizer (digits one by one): the model then read "2024" as four tokens it never trained
    # on. export_llama keeps the function; the tokenizer reads back as trained.
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.learn.models import build_tiny_model
    from agentrl.train.tokenizer import train_chat_tokenizer

    text = "Total revenue for Q3 2021 was $19.2 billion \\cite{https://ir.galandyne.example/news/2021-q3-results}."
    tokenizer = train_chat_tokenizer([text, "Net income for Q4 2024 was $3.1 billion."] * 20, 300)
    model = build_tiny_model(len(tokenizer), "tiny:layers=1,hidden=32,heads=2,kv_heads=1", seed=3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_()  # Qwen2's q/k/v biases must survive the export
    card = save_base(model, tokenizer, {"recipe": {"max_len": 512, "seed": 0}}, tmp_path)
    loaded, read = AutoModelForCausalLM.from_pretrained(tmp_path), AutoTokenizer.from_pretrained(tmp_path)
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, model.eval()(ids).logits, atol=1e-5)
    trained = Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode(text).ids
    assert read(text, add_special_tokens=False)["input_ids"] == trained == ids[0].tolist()
    assert set(card["heldout_copy"]) == {"tokens", "figures", "first_figure"}
    assert (
        all(0 <= v <= 1 for v in card["heldout_copy"].values())
        and len(card["sha256"]["model.safetensors"]) == 64
    )
    assert export_llama(model).config.model_type == "llama"
