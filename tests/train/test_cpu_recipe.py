"""What a pretrained model on a CPU needs from the trainer (``examples/smollm2``): a warm start that runs
in micro-batches with the gradient of one pass, training only the last decoder layers, and no
old-log-prob forward pass when the sampler's log-probs are used as they are."""

import copy
import random

import pytest
import torch

from agentrl.learn.forward import forward_logprobs
from agentrl.learn.models import build_tiny_model, train_last_layers
from agentrl.train import Trainer
from agentrl.train.sft import sft_step
from tests.train.learning_signal import assert_learning_signal
from tests.train.learning_signal import train_config as _cfg


def _warm_started(tmp_path, **over):
    t = Trainer(_cfg(tmp_path, **{"sft_steps": 1, "steps": 1, **over}), progress=False)
    t.setup()
    return t


def test_a_micro_batched_warm_start_step_equals_one_pass(tmp_path):
    """Same trajectories, same weights: one pass over the batch and micro-batches of one row each give
    the same loss and the same update (SGD with lr 1 writes the gradient into the weights)."""
    t = _warm_started(tmp_path)
    results = []
    for budget in (None, 1):  # 1 token: every row is its own micro-batch
        model = copy.deepcopy(t.model)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        rng = random.Random(7)
        loss = sft_step(
            model, opt, t.expander, t.sft_data, batch_size=6, rng=rng, pad_id=t.pad_id,
            grad_clip=1e9, micro_batch_tokens=budget,
        )  # fmt: skip
        results.append((loss, model.state_dict()))
    (loss_one, one), (loss_micro, micro) = results
    assert loss_one > 0 and loss_micro == pytest.approx(loss_one, rel=1e-5)
    moved = [k for k in one if not torch.equal(one[k], t.model.state_dict()[k])]
    assert moved, "the step changed nothing: the comparison would be empty"
    for k in one:
        torch.testing.assert_close(micro[k], one[k], rtol=1e-5, atol=1e-6)


def test_the_warm_start_splits_a_batch_over_the_token_budget(tmp_path, monkeypatch):
    """The trainer hands the warm start its micro-batch budget: a batch wider than the budget runs in
    several forward passes, none over the budget."""
    import agentrl.train.sft as sft

    t = _warm_started(tmp_path, **{"algorithm.micro_batch_tokens": 16, "sft_batch_size": 4})
    widths = []
    real = sft.forward_logprobs

    def spy(model, batch, *a, **k):
        widths.append(tuple(batch["input_ids"].shape))
        return real(model, batch, *a, **k)

    monkeypatch.setattr(sft, "forward_logprobs", spy)
    t.warm_start()
    assert len(widths) == 4 and all(rows == 1 for rows, _ in widths)


def test_trainable_layers_in_a_training_step(tmp_path):
    """``model.trainable_layers: 1`` on the one-layer answering model: a step moves that layer and the
    final norm, never the (tied) embeddings; the optimiser holds exactly the trainable parameters."""
    t = _warm_started(tmp_path, **{"model.trainable_layers": 1, "sft_steps": 0})
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    t.train_step()
    assert_learning_signal(t.out)
    after = t.model.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    last = len(t.model.get_decoder().layers) - 1
    assert any(k.startswith(f"model.layers.{last}.") for k in moved)
    assert all(k.startswith((f"model.layers.{last}.", "model.norm.")) for k in moved), moved
    trained = {id(p) for group in t.models.opt.param_groups for p in group["params"]}
    assert trained == {id(p) for p in t.model.parameters() if p.requires_grad}


def test_backward_stops_at_the_lowest_trained_layer():
    """Two layers, the last one trained: the loss's gradient reaches that layer and the final norm;
    the first layer and the embeddings get none."""
    model = build_tiny_model(64, "tiny:layers=2,hidden=32,heads=2,kv_heads=1")
    train_last_layers(model, 1)
    ids = torch.randint(0, 64, (2, 12))
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(12).expand(2, 12),
        "loss_mask": torch.ones_like(ids),
    }
    lp, _ = forward_logprobs(model, batch, policy_only=True)
    lp.sum().backward()
    layers = model.get_decoder().layers
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in layers[1].parameters())
    assert all(p.grad is None for p in layers[0].parameters())
    assert model.get_input_embeddings().weight.grad is None


def test_train_last_layers_counts_what_it_leaves_trainable(tmp_path):
    t = _warm_started(tmp_path, **{"sft_steps": 0})
    model = copy.deepcopy(t.model)
    n = train_last_layers(model, 1)
    expected = sum(p.numel() for p in model.get_decoder().layers[-1].parameters())
    expected += sum(p.numel() for p in model.get_decoder().norm.parameters())
    assert n == expected
    assert train_last_layers(model, 0) == sum(p.numel() for p in model.get_decoder().norm.parameters())


def test_trainable_layers_and_lora_are_refused_together(tmp_path):
    with pytest.raises(ValueError, match=r"trainable_layers and model\.lora_rank"):
        _cfg(tmp_path, **{"model.trainable_layers": 1, "model.lora_rank": 4})


def test_never_recomputing_old_logprobs_skips_the_pass_and_changes_nothing_else(tmp_path, monkeypatch):
    """At top-p 1 and staleness 0 "auto" already trains on the sampler's log-probs; "never" gives
    the same update without the recompute pass (and without the gap metric it feeds)."""
    import agentrl.train.trainer as trainer

    runs, calls, real = {}, [], trainer.chunked_forward
    monkeypatch.setattr(trainer, "chunked_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    for mode in ("auto", "never"):
        t = _warm_started(tmp_path / mode, **{"sft_steps": 0, "algorithm.recompute_old_logprobs": mode})
        calls.clear()
        m = t.train_step()
        runs[mode] = (m, t.model.state_dict(), len(calls))
    (m_auto, w_auto, n_auto), (m_never, w_never, n_never) = runs["auto"], runs["never"]
    assert "actor/rollout_logprob_diff" in m_auto and "actor/rollout_logprob_diff" not in m_never
    assert n_auto >= 1 and n_never == n_auto - 1
    assert m_never["actor/pg_loss"] == m_auto["actor/pg_loss"]
    assert all(torch.equal(w_auto[k], w_never[k]) for k in w_auto)
