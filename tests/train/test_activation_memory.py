"""Gradient checkpointing chosen by a micro-batch's activation memory (``model.gradient_checkpointing:
auto``), measured by a probe, and checkpointing that leaves frozen layers out of the backward pass."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl.errors import ConfigError
from agentrl.learn.memory import activation_bytes, checkpointing_choice, enable_checkpointing
from agentrl.learn.models import train_last_layers
from agentrl.train import Trainer
from tests.train.learning_signal import train_config as _cfg


def _llama(layers: int = 4, impl: str = "sdpa", dropout: float = 0.0) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, attn_implementation=impl, attention_dropout=dropout,
    )  # fmt: skip
    return LlamaForCausalLM(cfg)


def _checkpointed(model) -> bool:
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def _saved_bytes_of_a_pass(model, tokens: int, packed: bool = False) -> int:
    """The distinct non-parameter storages a real forward pass saves, counted independently (with
    two rows packed into the line when ``packed``, as the update packs them)."""
    from agentrl.tokens import block_causal_mask

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    kw = {}
    if packed:
        seq = (torch.arange(tokens) >= tokens // 2).long()[None]  # two rows in one line
        kw = {
            "attention_mask": block_causal_mask(seq),
            "position_ids": torch.arange(tokens)[None] % (tokens // 2),
        }
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.model(input_ids=torch.ones(1, tokens, dtype=torch.long), use_cache=False, **kw)
    return sum(seen.values())


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_the_probe_predicts_a_longer_pass(impl):
    """Fitted on 32 and 64 tokens, the cost predicts what a 256-token pass keeps (within 5%), with a
    quadratic term only for eager attention (it keeps [heads, T, T] probabilities: 4 heads × 4 bytes
    per pair of tokens in each layer)."""
    model = _llama(impl=impl)
    cost = activation_bytes(model)
    assert cost.at(256) == pytest.approx(_saved_bytes_of_a_pass(model, 256), rel=0.05)
    if impl == "sdpa":
        assert cost.per_token_pair == 0
    else:
        assert cost.per_token_pair == pytest.approx(4 * 4 * 4, rel=0.1)


def test_the_packed_rows_mask_is_measured():
    """Packed rows attend through a [T, T] block-causal mask that the attention keeps for backward:
    the packed probe has the quadratic term the plain one lacks, and predicts a packed pass."""
    model = _llama()
    plain, packed = activation_bytes(model), activation_bytes(model, packed=True)
    assert plain.per_token_pair == 0 < packed.per_token_pair
    assert packed.at(256) == pytest.approx(_saved_bytes_of_a_pass(model, 256, packed=True), rel=0.05)
    # Lines are at most max_len long: the quadratic term is per line, not per micro-batch.
    assert packed.at(4096, line=256) == pytest.approx(16 * packed.at(256))


def test_frozen_layers_keep_nothing():
    """Training the last layer of four keeps about a quarter of what training all four keeps."""
    full = activation_bytes(_llama()).per_token
    model = _llama()
    train_last_layers(model, 1)
    assert activation_bytes(model).per_token == pytest.approx(full / 4, rel=0.15)


def test_the_probe_measures_training_mode():
    """A pretrained model loads in eval mode; the update runs in train mode, where dropout keeps its
    masks: the probe measures train mode whatever the model's mode, and leaves the mode as it was."""
    trained = activation_bytes(_llama(impl="eager", dropout=0.5).train())
    model = _llama(impl="eager", dropout=0.5).eval()
    assert activation_bytes(model) == trained and not model.training
    assert trained.per_token_pair > activation_bytes(_llama(impl="eager")).per_token_pair


def test_the_probe_draws_nothing_from_the_random_streams():
    model = _llama(dropout=0.5).train()
    torch.manual_seed(3)
    activation_bytes(model)
    after_probe = torch.rand(4)
    torch.manual_seed(3)
    assert torch.equal(after_probe, torch.rand(4))


def test_the_choice():
    model = _llama()
    need = activation_bytes(model).at(1000) / 2**20
    on, why = checkpointing_choice(model, "auto", 1000, budget_mb=need * 0.9)
    assert on and "auto" in why and "over" in why
    on, why = checkpointing_choice(model, "auto", 1000, budget_mb=need * 1.1)
    assert not on and "within" in why
    assert checkpointing_choice(model, True, 1000, budget_mb=1e9)[0]
    assert not checkpointing_choice(model, False, 1000, budget_mb=1e-9)[0]
    assert checkpointing_choice(model, "auto", 10**9, budget_mb=None)[1].endswith(
        "over model.activation_memory_mb = 1,024)"
    )
    model.requires_grad_(False)
    assert checkpointing_choice(model, "auto", 1000, budget_mb=1e-9) == (
        False,
        "gradient checkpointing: off (auto: nothing trains)",
    )


def test_a_model_that_cannot_checkpoint():
    """``true`` is an error naming the setting; ``auto`` stays off and says why, as it does when the
    probe cannot run the model."""
    model = _llama()
    model.supports_gradient_checkpointing = False
    with pytest.raises(ConfigError, match=r"model\.gradient_checkpointing: true, but LlamaForCausalLM"):
        checkpointing_choice(model, True, 1000, budget_mb=1)
    assert checkpointing_choice(model, "auto", 1000, budget_mb=1e-9) == (
        False,
        "gradient checkpointing: off (auto: LlamaForCausalLM does not support it)",
    )
    model = _llama()
    model.model.forward = lambda **kw: (_ for _ in ()).throw(TypeError("no input_ids here"))
    on, why = checkpointing_choice(model, "auto", 1000, budget_mb=1e-9)
    assert not on and why.endswith("the probe pass failed: TypeError: no input_ids here)")


def test_checkpointing_leaves_frozen_layers_out_of_backward():
    """With the last two of four layers trained, checkpointing gives the gradients of no checkpointing,
    and the frozen layers' outputs need no gradient (transformers' hook on the input embeddings would
    put them into the backward pass: a second backward through every frozen layer)."""
    ids = torch.randint(0, 64, (2, 48), generator=torch.Generator().manual_seed(1))
    grads, needs = [], []
    for ckpt in (False, True):
        model = _llama().train()
        train_last_layers(model, 2)
        if ckpt:
            enable_checkpointing(model)
        seen = []
        model.model.layers[1].register_forward_hook(lambda m, a, o, seen=seen: seen.append(o.requires_grad))
        model(ids).logits.pow(2).mean().backward()
        grads.append([p.grad for p in model.parameters() if p.requires_grad])
        needs.append(seen[0])
    assert needs == [False, False]
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def test_the_trainer_decides_and_says_so(tmp_path):
    """The quickstart-sized model stays unchecked under the default budget; a budget below what it
    keeps turns checkpointing on, and the run's log says which and why."""
    quiet = Trainer(_cfg(tmp_path / "a", **{"sft_steps": 0, "steps": 1}), progress=False)
    quiet.setup()
    assert quiet.models.checkpointing.startswith("gradient checkpointing: off (auto:")
    assert not _checkpointed(quiet.model)
    tight = Trainer(
        _cfg(tmp_path / "b", **{"sft_steps": 0, "steps": 1, "model.activation_memory_mb": 0.001}),
        progress=False,
    )
    tight.setup()
    assert tight.models.checkpointing.startswith("gradient checkpointing: on (auto:")
    assert _checkpointed(tight.model)
