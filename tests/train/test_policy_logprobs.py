"""``forward_logprobs(..., policy_only=True)``: the LM head on the policy's tokens only gives the same
log-probabilities, entropies and gradients as the full forward pass, on the tokens that train."""

import pytest
import torch

from agentrl.learn.forward import _split_head, forward_logprobs
from agentrl.learn.models import build_tiny_model
from tests.tokens.fixtures import make_tokenizer
from tests.train.test_update import _batch, _trajectories


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer("chatml")


def _model(tok, seed=0):
    return build_tiny_model(len(tok), "tiny:layers=2,hidden=32,heads=2,kv_heads=1", seed=seed)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_policy_only_equals_the_full_pass_on_policy_tokens(tok, temperature):
    batch = _batch(tok, _trajectories(tok))
    mask = batch["loss_mask"].bool()
    assert 0 < mask.sum() < mask.numel() // 2  # the observation and prompt tokens are most of a row
    model = _model(tok)
    full_lp, full_ent = forward_logprobs(model, batch, temperature, with_entropy=True)
    lp, ent = forward_logprobs(model, batch, temperature, with_entropy=True, policy_only=True)
    torch.testing.assert_close(lp[mask], full_lp[mask], rtol=0, atol=2e-6)
    torch.testing.assert_close(ent[mask], full_ent[mask], rtol=0, atol=2e-6)
    assert not lp[~mask].any() and not ent[~mask].any()  # nothing computed off the policy's tokens


def test_policy_only_gives_the_full_pass_gradients(tok):
    batch = _batch(tok, _trajectories(tok))
    mask = batch["loss_mask"]
    grads = []
    for policy_only in (False, True):
        model = _model(tok)
        lp, ent = forward_logprobs(model, batch, 0.9, with_entropy=True, policy_only=policy_only)
        loss = -(lp * mask).sum() / mask.sum() - 0.01 * (ent * mask).sum() / mask.sum()
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=1e-6, msg=name)
    assert any(g.abs().sum() > 0 for g in grads[1].values())


def test_lora_reference_through_the_split_head(tok):
    peft = pytest.importorskip("peft")
    batch = _batch(tok, _trajectories(tok))
    mask = batch["loss_mask"].bool()
    base = _model(tok)
    model = peft.get_peft_model(
        _model(tok), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    with model.disable_adapter():  # the trainer's reference under LoRA: the base model
        ref, _ = forward_logprobs(model, batch, policy_only=True)
    torch.testing.assert_close(ref[mask], forward_logprobs(base, batch)[0][mask], rtol=0, atol=2e-6)
    lora, _ = forward_logprobs(model, batch, policy_only=True)
    assert (lora[mask] - ref[mask]).abs().max() > 1e-4  # the adapters are live outside the context
    torch.testing.assert_close(lora[mask], forward_logprobs(model, batch)[0][mask], rtol=0, atol=2e-6)


def test_models_without_a_separable_head_run_whole(tok):
    class Opaque(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **kw):
            return self.inner(**kw)

    batch = _batch(tok, _trajectories(tok))
    model = _model(tok)
    assert _split_head(model) is not None and _split_head(Opaque(model)) is None
    lp, _ = forward_logprobs(Opaque(model), batch, policy_only=True)  # falls back to the full pass
    torch.testing.assert_close(lp, forward_logprobs(model, batch)[0])
