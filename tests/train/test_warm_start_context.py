"""The warm start with context management (``rollout.context``): the oracle's episodes are played in
token mode through the run's expander and context policy, so a long one carries its context
segments, and the warm start trains one row per segment (``expand_segments``) with the loss on that
segment's own turns — what the policy will see. Without context management the warm start's data
and rows are those of a chat-mode oracle, as before."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from agentrl.algos import masked_mean
from agentrl.env import ResearchEnv
from agentrl.learn.forward import forward_logprobs
from agentrl.learn.models import build_tiny_model
from agentrl.rollout.context import ContextPolicy
from agentrl.rollout.episode import Limits
from agentrl.tokens import collate, expand_segments, sampling_spec
from agentrl.train import Trainer
from agentrl.train.sft import collect_oracle_trajectories, sft_rows, sft_step
from agentrl.trajectory.context import segments
from tests.tokens.fixtures import make_tokenizer_cached
from tests.train.learning_signal import train_config

SUITE = str(Path(__file__).resolve().parents[2] / "examples" / "long-horizon-env")
MAX_LEN, MAX_NEW = 3000, 400  # the tests' tokenizer: a three-company comparison needs a rewrite
ARRAYS = ("input_ids", "loss_mask", "turn_ids", "token_level_scores")


@pytest.fixture(scope="module")
def oracle_data():  # type: ignore[no-untyped-def]
    """The tests' tokenizer and expander, the multi-source tasks, and the oracle's episodes of them
    in token mode with ``drop_observations``."""
    tok = make_tokenizer_cached("chatml")
    exp = sampling_spec(tok, max_len=MAX_LEN, max_new_tokens=MAX_NEW).expander(tok)
    env_config = {"suite": SUITE}
    tasks = [t for t in ResearchEnv(env_config).tasks if t.ground_truth.get("steps")]
    limits = Limits(MAX_NEW, MAX_LEN, context=ContextPolicy("drop_observations"))
    trajs = collect_oracle_trajectories(env_config, tasks, 0.0, 0, expander=exp, limits=limits)
    return tok, exp, env_config, tasks, trajs


def _same_rows(a, b) -> bool:  # type: ignore[no-untyped-def]
    return len(a) == len(b) and all(
        x.trajectory_id == y.trajectory_id
        and all(np.array_equal(getattr(x, k), getattr(y, k)) for k in ARRAYS)
        for x, y in zip(a, b, strict=True)
    )


def test_token_mode_oracle_episodes_carry_segments_and_train_each_turn_once(oracle_data):
    """Every episode answers within ``max_len``; the long ones were rewritten; the warm start's rows
    are ``expand_segments``' rows, each within ``max_len``, and together their loss tokens are every
    sampled turn exactly once, in order (each row's loss is on its own segment's turns)."""
    _, exp, _, tasks, trajs = oracle_data
    assert [t.id for t in trajs] == [f"{t.id}#0" for t in tasks]
    assert all(t.info["status"] == "answered" for t in trajs)
    assert max(len(segments(t)) for t in trajs) > 1
    rows = sft_rows(exp, trajs)
    assert _same_rows(rows, [r for t in trajs for r in expand_segments(exp, t)])
    assert len(rows) == sum(len(segments(t)) for t in trajs) and max(len(r) for r in rows) <= MAX_LEN
    at = 0
    for t in trajs:
        n = len(segments(t))
        trained = [int(i) for r in rows[at : at + n] for i in r.input_ids[r.loss_mask == 1]]
        sampled = [i for m in t.messages if m.role == "assistant" for i in m.token_ids or []]
        assert sampled and trained == sampled, t.id
        at += n


def test_sft_step_trains_on_the_segment_rows(oracle_data):
    """``sft_step``'s loss and update are those of the picked episodes' segment rows, not of one row
    per episode cut at ``max_len`` (which loses the turns after the cut and the stubbed views)."""
    tok, exp, _, _, trajs = oracle_data
    long = [t for t in trajs if len(segments(t)) > 1]
    model = build_tiny_model(len(tok), "tiny:layers=1,hidden=32,heads=2,kv_heads=1", seed=0)
    start = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    pad = tok.pad_token_id
    got = sft_step(model, opt, exp, long, batch_size=2, rng=random.Random(3), pad_id=pad)
    pick = random.Random(3)
    picked = [long[pick.randrange(len(long))] for _ in range(2)]

    def reference(rows):  # type: ignore[no-untyped-def]
        """The loss and the weights after one clipped SGD step on ``rows``, written out."""
        ref = copy.deepcopy(start).train()
        batch = collate(rows, pad_token_id=pad)
        lp, _ = forward_logprobs(ref, batch, policy_only=True)
        loss = -masked_mean(lp, batch["loss_mask"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 1.0)
        with torch.no_grad():
            for p in ref.parameters():
                p -= 0.5 * p.grad
        return loss.item(), torch.cat([p.detach().flatten() for p in ref.parameters()])

    moved = torch.cat([p.detach().flatten() for p in model.parameters()])
    want_loss, want = reference([r for t in picked for r in expand_segments(exp, t)])
    assert got == pytest.approx(want_loss, rel=1e-5)
    assert torch.allclose(moved, want, atol=1e-6)
    _, cut = reference(exp.expand_many(picked))
    assert not torch.allclose(moved, cut, atol=1e-4)


def test_without_context_the_warm_start_data_is_the_chat_oracle(oracle_data):
    """No expander: chat-mode episodes (no token ids, no segments), and their rows are ``expand``'s;
    the token-mode episodes are the same tasks, samples and reset seeds."""
    _, exp, env_config, tasks, trajs = oracle_data
    chat = collect_oracle_trajectories(env_config, tasks, 0.0, 0)
    assert all(len(segments(t)) == 1 for t in chat)
    assert not any(m.token_ids for t in chat for m in t.messages)
    assert _same_rows(sft_rows(exp, chat), exp.expand_many(chat))
    assert [(t.id, t.info["seed"], t.info["sample"]) for t in chat] == [
        (t.id, t.info["seed"], t.info["sample"]) for t in trajs
    ]


def _trainer(tmp_path: Path, strategy: str) -> Trainer:
    over = {
        "model": {"path": "tiny:layers=1,hidden=32,heads=2,kv_heads=1", "tokenizer_vocab_size": 2048},
        "rollout.suite": SUITE,
        "rollout.max_len": 1280,
        "rollout.max_new_tokens": 128,
        "rollout.max_turns": 8,
        "rollout.context": {"strategy": strategy},
        "rollout.env": {},
        "judge": {},
        "sft_steps": 1,
        "sft_episodes": 45,
        "sft_noise": 0.0,
    }
    t = Trainer(train_config(tmp_path / strategy, **over), progress=False)
    t.setup()
    t.pool.shutdown(wait=False)
    t.judge.close()
    return t


def test_the_trainer_plays_the_warm_start_oracle_through_its_context_policy(tmp_path):
    """With ``drop_observations`` the trainer's warm-start data is the oracle in token mode through
    its expander and limits (long episodes rewritten, every turn within ``max_new_tokens``, all
    answered); without, it is the chat-mode oracle's; both have the same episodes, and the
    tokenizer trained in-process is the same."""
    none, drop = _trainer(tmp_path, "none"), _trainer(tmp_path, "drop_observations")
    assert [t.id for t in none.sft_data] == [t.id for t in drop.sft_data]
    assert none.tokenizer.get_vocab() == drop.tokenizer.get_vocab()
    assert not any(m.token_ids for t in none.sft_data for m in t.messages)
    assert max(len(segments(t)) for t in none.sft_data) == 1
    assert max(len(segments(t)) for t in drop.sft_data) > 1
    assert all(t.info["status"] == "answered" for t in drop.sft_data)
    turns = [m.token_ids for t in drop.sft_data for m in t.messages if m.role == "assistant"]
    assert all(ids and len(ids) <= 128 and ids[-1] in drop.stop_ids for ids in turns)
    assert max(len(r) for r in sft_rows(drop.expander, drop.sft_data)) <= 1280


def test_the_long_horizon_example_needs_and_has_context_management():
    """``examples/long-horizon.yaml`` trains on the long-horizon suite with its env's turn budget,
    drops old observations, evaluates on the held-out companies before and after RL, and its
    ``max_len`` is one the oracle needs a rewrite for (measured in the test above at the tests'
    tokenizer's scale: the example's own in-process tokenizer is checked by the CPU run)."""
    from agentrl.env.config import read_env_yaml
    from agentrl.train.config import load_train_config

    cfg = load_train_config(Path(SUITE).parent / "long-horizon.yaml")
    env = read_env_yaml(Path(SUITE) / "env.yaml")
    assert Path(cfg.rollout.suite).resolve() == Path(SUITE).resolve()
    assert cfg.rollout.max_turns == env["budgets"]["max_turns"]
    assert cfg.rollout.context.strategy == "drop_observations" and cfg.rollout.max_len <= 1536
    assert cfg.sft_steps > 0 and cfg.steps > 0
    assert (cfg.eval.split, cfg.eval.before_train, cfg.eval.at_end) == ("heldout", True, True)


def test_a_warm_start_with_nothing_within_max_len_says_so(tmp_path, capsys):
    """A task prompt longer than max_len leaves the warm start no token to learn (loss 0.0000): a
    line says why, where it printed the zero loss alone (issue 35, row 4's suite of a 3 MB prompt)."""
    import yaml

    from agentrl.cli import main
    from tests.train.learning_signal import config_dict

    cfg = tmp_path / "c.yaml"
    data = config_dict(output_dir=str(tmp_path / "run"), steps=0, sft_steps=2)
    data["rollout"]["max_len"] = 16  # shorter than any prompt
    data["rollout"]["max_new_tokens"] = 8
    cfg.write_text(yaml.safe_dump(data))
    assert main(["train", str(cfg), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "warm start 1/2: loss 0.0000" in err
    assert (
        "warning: warm start step 1 had no token to learn from: its trajectories have no policy turn within rollout.max_len (16)"
        in err
    )
