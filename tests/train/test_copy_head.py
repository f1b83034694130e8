"""The copy head (``agentrl.learn.copy_lm``): a distribution over the vocabulary whose pointer part
lies on the context's tokens; the same log-probabilities from a full pass, a cached decode, a packed
pass and the sampler; saved and loaded as a transformers model; and it copies tokens it never
trained on, which the plain model of the same size does not."""

from __future__ import annotations

import pytest
import torch

from agentrl.algos import logprobs_from_logits
from agentrl.learn.forward import forward_logprobs
from agentrl.learn.models import build_tiny_model, copy_head_of
from agentrl.sampling.generate import sample_batch

SPEC = "tiny:layers=2,hidden=32,heads=2,kv_heads=1,copy=16"


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = build_tiny_model(97, SPEC, seed=1).eval()
    with torch.no_grad():  # a gate that is neither off nor on, so both parts count
        m.copy_gate.bias.fill_(0.5)
    return m


def test_the_spec_builds_a_copy_head(model):
    assert copy_head_of(model) and not copy_head_of(build_tiny_model(97, "tiny:hidden=32", seed=1))
    assert type(model).__name__ == "CopyForCausalLM" and model.config.copy_dim == 16


def test_a_distribution_whose_pointer_lies_on_the_context(model):
    ids = torch.tensor([[5, 9, 9, 40, 12, 77]])
    with torch.no_grad():
        p = model(input_ids=ids).logits.exp()
        assert torch.allclose(p.sum(-1), torch.ones(1, 6), atol=1e-5)
        model.copy_gate.bias.fill_(60.0)  # all the mass on the pointer
        q = model(input_ids=ids).logits.exp()
        model.copy_gate.bias.fill_(0.5)
    for t in range(6):
        seen = set(ids[0, : t + 1].tolist())
        on = q[0, t, sorted(seen)].sum().item()
        assert on == pytest.approx(1.0, abs=1e-5)  # only tokens at positions ≤ t
    assert q[0, 0, 5].item() == pytest.approx(1.0, abs=1e-5)  # position 0 sees itself alone


def _left_padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(map(len, rows))
    ids = torch.zeros(len(rows), n, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, n - len(r) :], mask[i, n - len(r) :] = torch.tensor(r), 1
    return ids, mask


def test_a_cached_decode_equals_the_full_pass(model):
    """Left-padded rows prefilled, then decoded one token at a time through the cache (as the sampler
    does): the same log-probabilities as one pass over each row alone."""
    rows = [[3, 8, 8, 21, 4, 50, 8, 21], [60, 61, 3, 8, 60], [7, 7, 7, 7, 7, 7, 7, 7, 2]]
    prefill = 4
    ids, mask = _left_padded([r[:-prefill] for r in rows])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        past, last = out.cache, [out.logits[:, -1]]
        for k in range(prefill - 1):
            nxt = torch.tensor([[r[len(r) - prefill + k]] for r in rows])
            mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=torch.long)], 1)
            pos = pos[:, -1:] + 1
            out = model(input_ids=nxt, attention_mask=mask, position_ids=pos, cache=past, use_cache=True)
            past = out.cache
            last.append(out.logits[:, -1])
        for i, r in enumerate(rows):
            full = model(input_ids=torch.tensor([r])).logits[0]
            want = full[len(r) - prefill - 1 : len(r) - 1]
            assert torch.allclose(torch.stack([x[i] for x in last]), want, atol=1e-4)


def test_packed_and_policy_only_passes_agree(model):
    rows = [[3, 8, 8, 21, 4, 50], [60, 61, 3], [7, 9, 7, 9, 11, 12, 13, 14]]
    ids = torch.zeros(3, 8, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    batch = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        "loss_mask": mask.float(),
    }
    with torch.no_grad():
        plain, _ = forward_logprobs(model, batch)
        packed, _ = forward_logprobs(model, batch, pack=True)
        policy, _ = forward_logprobs(model, batch, policy_only=True)
    keep = mask.bool().clone()
    keep[:, 0] = False
    assert torch.allclose(plain[keep], packed[keep], atol=1e-5)
    assert torch.allclose(plain[keep], policy[keep], atol=1e-5)
    for i, r in enumerate(rows):  # each row alone
        alone = model(input_ids=torch.tensor([r])).logits
        want = logprobs_from_logits(alone[:, :-1], torch.tensor([r])[:, 1:])[0]
        assert torch.allclose(plain[i, 1 : len(r)], want, atol=1e-5)


@pytest.mark.parametrize("pack", [False, True])
def test_the_policy_tokens_alone_are_the_whole_passs(model, pack):
    """``policy_only`` runs the pointer's queries and the [N, V] mixture at the policy's tokens alone
    (``logits_at``): the same log-probs, entropies and gradients there as the whole pass, 0 elsewhere."""
    # packed, the longest row fills line 0 and the other two share line 1 (its 4D mask keeps them
    # apart), so the lines are not in the rows' order
    rows = [[60, 61, 3, 60, 61], [3, 8, 8, 21, 4, 50, 8, 21, 4], [7, 9, 7, 9]]
    ids = torch.zeros(3, 9, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    policy = torch.zeros(3, 9)
    policy[0, 3:5], policy[1, 5:9], policy[2, 2:4] = 1, 1, 1  # turns, as an expander marks them
    batch = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        "loss_mask": policy,
    }
    results = {}
    for only in (False, True):
        model.zero_grad()
        lp, ent = forward_logprobs(model, batch, 0.7, with_entropy=True, pack=pack, policy_only=only)
        (lp * policy).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[only] = (lp.detach(), ent.detach(), grads)
    (whole_lp, whole_ent, whole_g), (lp, ent, g) = results[False], results[True]
    want = policy.bool()
    assert torch.allclose(lp[want], whole_lp[want], atol=1e-5)
    assert torch.allclose(ent[want], whole_ent[want], atol=1e-5)
    assert not lp[~want].any() and not ent[~want].any()
    assert g.keys() == whole_g.keys() and {"copy_query.weight", "copy_match"} <= g.keys()
    for name in g:
        assert torch.allclose(g[name], whole_g[name], atol=1e-5), name


@pytest.mark.parametrize("pack", [False, True])
def test_a_micro_batch_without_policy_tokens_backpropagates_zeros(model, pack):
    # a micro-batch whose rows are all masked (truncated rows dropped by algorithm.overlong): the loss
    # of nothing is 0 with a graph, as the whole pass gives, not a tensor backward refuses
    ids = torch.tensor([[3, 8, 8, 21], [60, 61, 3, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    batch = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        "loss_mask": torch.zeros(2, 4),
    }
    model.zero_grad()
    lp, ent = forward_logprobs(model, batch, with_entropy=True, pack=pack, policy_only=True)
    assert lp.requires_grad and not lp.any() and not ent.any()
    (lp * batch["loss_mask"]).sum().backward()
    assert all(not p.grad.any() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_sampler_records_the_models_logprobs(model, temperature):
    """Rows of different lengths that stop at different times (so the sampler drops finished rows):
    each row's recorded log-probs are those of one full pass over it; a row's tokens do not depend
    on the batch."""
    prompts = [[3, 8, 8, 21, 4], [60, 61], [7, 9, 7, 9, 11, 12, 13]]
    out = sample_batch(
        model, prompts, seeds=[1, 2, 3], stop_ids={8, 9}, pad_id=0, max_new_tokens=12, temperature=temperature
    )
    for p, s, seed in zip(prompts, out, [1, 2, 3], strict=True):
        ids = torch.tensor([p + s.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits / temperature
        full = logprobs_from_logits(logits[:, :-1], ids[:, 1:])[0, len(p) - 1 :]
        assert torch.allclose(torch.tensor(s.logprobs), full, atol=1e-4)
        alone = sample_batch(
            model, [p], seeds=[seed], stop_ids={8, 9}, pad_id=0, max_new_tokens=12, temperature=temperature
        )[0]
        assert alone.token_ids == s.token_ids
    assert len({len(s.token_ids) for s in out}) > 1  # rows ended at different steps


def test_saved_and_loaded_as_a_transformers_model(model, tmp_path):
    from agentrl.learn.policy_model import load_policy_model
    from tests.integrations.helpers import tokenizer

    tok = tokenizer()
    m = build_tiny_model(len(tok), SPEC, seed=2).eval()
    m.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded = load_policy_model(tmp_path, device="cpu")
    ids = torch.tensor([[5, 9, 9, 40, 12, 77, 9]])
    with torch.no_grad():
        assert torch.allclose(m(input_ids=ids).logits, loaded.model(input_ids=ids).logits, atol=1e-5)
    assert copy_head_of(loaded.model)


def _copy_batch(gen: torch.Generator, lo: int, hi: int, n: int = 32, k: int = 6) -> torch.Tensor:
    """Rows ``x_1 … x_k SEP x_1 … x_k`` with the x drawn from [lo, hi): the second half is a copy."""
    x = torch.randint(lo, hi, (n, k), generator=gen)
    return torch.cat([x, torch.full((n, 1), 1), x], dim=1)


def _copy_accuracy(m: torch.nn.Module, rows: torch.Tensor, k: int = 6) -> float:
    """How often the copy's 2nd … k-th token is the most likely next one (the 1st has no id before it
    to match; finding it is the content part, which needs trained embeddings)."""
    with torch.no_grad():
        pred = m(input_ids=rows).logits[:, k + 1 : -1].argmax(-1)
    return (pred == rows[:, k + 2 :]).float().mean().item()


def test_it_copies_tokens_it_never_trained_on():
    """Each model trained to repeat sequences of tokens 10–49 until it does (≥ 95% of the copies'
    tokens right): the copy head then repeats sequences of tokens 50–95 that it never saw (their
    embeddings untrained) by matching ids; the plain model of the same size, which can only match
    embeddings, does not."""
    torch.manual_seed(0)
    acc = {}
    for spec in ("tiny:layers=2,hidden=32,heads=2,kv_heads=1", SPEC):
        m = build_tiny_model(96, spec, seed=0)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
        gen = torch.Generator().manual_seed(0)
        for step in range(1, 401):
            rows = _copy_batch(gen, 10, 50)
            logits = m(input_ids=rows).logits[:, 6:-1]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 96), rows[:, 7:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (
                step % 25 == 0
                and _copy_accuracy(m.eval(), _copy_batch(torch.Generator().manual_seed(8), 10, 50)) >= 0.95
            ):
                break
            m.train()
        assert step < 400, f"{spec} never learned to copy the tokens it trained on"
        acc[spec] = _copy_accuracy(m.eval(), _copy_batch(torch.Generator().manual_seed(9), 50, 96, n=64))
    plain, copy = acc.values()
    assert copy > 0.7, acc
    assert plain < 0.2, acc


def test_the_activation_probe_counts_the_head():
    """The trainer runs a copy head whole, so what a micro-batch keeps includes its [T, V] mixture."""
    from agentrl.learn.memory import activation_bytes

    spec = "tiny:layers=2,hidden=32,heads=2,kv_heads=1"
    plain = activation_bytes(build_tiny_model(4096, spec, seed=0)).per_token
    copy = activation_bytes(build_tiny_model(4096, spec + ",copy=16", seed=0)).per_token
    assert copy > plain + 4 * 4096  # at least a float32 row of the vocabulary more per token


def test_vllm_and_lora_cannot_run_a_copy_head(tmp_path):
    """A copy head, given as a spec or as a saved model's directory: vLLM cannot sample it and LoRA
    would leave it untrained, so both are config errors; a plain model is not refused."""
    from agentrl.errors import ConfigError
    from agentrl.train.config import load_train_config

    build_tiny_model(300, SPEC, seed=0).save_pretrained(tmp_path / "copy")
    build_tiny_model(300, "tiny:layers=2,hidden=32", seed=0).save_pretrained(tmp_path / "plain")
    for path in (SPEC, str(tmp_path / "copy")):
        for key, value in (("rollout.engine", "vllm"), ("model.lora_rank", 4)):
            cfg = {"model.path": path, key: value, "rollout.suite": "examples/quickstart-env"}
            with pytest.raises(ConfigError, match="copy head"):
                load_train_config(None, cfg, allow_empty=True)
    for path in ("tiny:layers=2", str(tmp_path / "plain")):
        cfg = {"model.path": path, "rollout.engine": "vllm", "rollout.suite": "examples/quickstart-env"}
        assert load_train_config(None, cfg, allow_empty=True).rollout.engine == "vllm"


def test_trainable_layers_train_the_copy_head_and_a_shared_critic_reads_it():
    from agentrl.learn.models import ValueModel, train_last_layers

    m = build_tiny_model(97, SPEC, seed=1)
    train_last_layers(m, 1)
    trained = {n for n, p in m.named_parameters() if p.requires_grad}
    assert {"copy_match", "copy_gate.weight", "copy_query.weight", "copy_key.weight"} <= trained
    assert not any(n.startswith("model.layers.0.") or "embed" in n for n in trained)
    critic = ValueModel.from_policy(m, shared=True)
    ids = torch.tensor([[5, 9, 9, 40]])
    assert critic(ids, attention_mask=torch.ones_like(ids)).shape == (1, 4)


def test_the_match_bonus_gradient_is_autograds():
    """The memory-saving autograd function of the match bonus gives the gradient plain indexing does."""
    from agentrl.learn.copy_lm import _MatchBonus

    lengths = torch.randint(0, 5, (2, 3, 7), generator=torch.Generator().manual_seed(0)).to(torch.uint8)
    w = torch.randn(4, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 3, 7, dtype=torch.float64)
    (_MatchBonus.apply(lengths, w) * g).sum().backward()
    ours, w.grad = w.grad.clone(), None
    table = torch.cat([w.new_zeros(1), w.cumsum(0)])
    (table[lengths.long()] * g).sum().backward()
    assert torch.allclose(ours, w.grad)


def test_rows_packed_by_position_ids_alone_stay_apart():
    """FlashAttention's packing passes no mask, only position ids that restart per row: the pointer
    of one row never points into another (with the gate open, all of a row's mass is on its own ids)."""
    m = build_tiny_model(97, SPEC, seed=1).eval()
    a, b = [3, 4, 5, 6], [60, 61, 62, 63, 64]
    line = torch.tensor([a + b])
    pos = torch.tensor([list(range(len(a))) + list(range(len(b)))])
    with torch.no_grad():
        m.copy_gate.bias.fill_(60.0)
        p = m(input_ids=line, position_ids=pos).logits.exp()[0]
    assert p[len(a) :, a].max().item() < 1e-6  # row b's pointer never reaches row a's ids
    assert p[len(a) :, b].sum(-1).min().item() == pytest.approx(1.0, abs=1e-5)
