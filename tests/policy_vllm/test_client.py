"""The vLLM client against a fake server in vLLM's wire format: token-id prompts in, sampled ids and
logprobs out (exactly what the sampler drew), stop/length, the version gate, errors."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.errors import ConfigError
from agentrl.rollout.episode import turn_finish
from agentrl.sampling.generate import sample_batch
from agentrl.sampling.vllm_client import (
    SUPPORTED_VLLM,
    VLLMClient,
    VLLMError,
    VLLMVersionError,
    check_version,
    parse_version,
    server_root,
)


def _gen(url, name="policy", **kw):
    client_kw = {k: kw.pop(k) for k in ("logprobs_processed", "retries") if k in kw}

    async def go():
        async with VLLMClient(url, name, **client_kw) as c:
            return await c.generate(**kw)

    return asyncio.run(go())


def test_generation_is_exactly_what_the_sampler_drew(fake, tok, model):
    srv = fake(model=model)
    prompt = tok.encode("the quarterly results of the company")
    stop = {tok.convert_tokens_to_ids("<|im_end|>")}
    g = _gen(srv.url + "/v1", prompt_ids=prompt, max_tokens=12, temperature=0.7, seed=11, stop_ids=stop)
    (ref,) = sample_batch(
        model, [prompt], seeds=[11], stop_ids=stop, pad_id=0, max_new_tokens=12, temperature=0.7
    )
    assert g.token_ids == ref.token_ids and g.finish_reason == turn_finish(ref.token_ids, stop)
    assert g.logprobs == pytest.approx(ref.logprobs, abs=1e-6)
    (_, path, body) = srv.calls[-1]
    assert path == "/v1/completions"
    assert body["prompt"] == prompt and body["max_tokens"] == 12 and body["seed"] == 11
    assert body["return_token_ids"] is True and body["logprobs"] == 1
    assert body["stop_token_ids"] == sorted(stop) and body["temperature"] == 0.7


def test_stop_and_length_finish_reasons(fake, tok, model):
    srv = fake(model=model)
    prompt = tok.encode("hello")
    every = set(range(len(tok)))  # whatever is sampled first is a stop token
    g = _gen(srv.url, prompt_ids=prompt, max_tokens=8, seed=1, stop_ids=every)
    assert g.finish_reason == "stop" and len(g.token_ids) == 1 and len(g.logprobs) == 1
    g = _gen(srv.url, prompt_ids=prompt, max_tokens=5, seed=1, stop_ids=set())
    assert g.finish_reason == "length" and len(g.token_ids) == 5


def test_a_stop_token_left_out_of_the_ids_is_put_back(fake, tok, model):
    srv = fake(model=model, drop_stop_token=True)
    every = set(range(len(tok)))
    g = _gen(srv.url, prompt_ids=tok.encode("hello"), max_tokens=8, seed=1, stop_ids=every)
    (ref,) = sample_batch(model, [tok.encode("hello")], seeds=[1], stop_ids=every, pad_id=0, max_new_tokens=8)
    assert g.token_ids == ref.token_ids and g.finish_reason == "stop"
    assert g.logprobs is None  # the stop token's logprob was not reported: the trainer recomputes


def test_ids_from_token_id_strings_when_the_server_has_no_return_token_ids(fake, tok, model):
    with_ids = fake(model=model)
    without = fake(model=model, token_ids=False)
    prompt = tok.encode("a b c")
    a = _gen(with_ids.url, prompt_ids=prompt, max_tokens=6, seed=5)
    b = _gen(without.url, prompt_ids=prompt, max_tokens=6, seed=5)
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


def test_raw_logprobs_are_dropped_when_they_are_not_the_sampling_distribution(fake, tok, model):
    srv = fake(model=model)
    prompt = tok.encode("a b c")
    hot = _gen(srv.url, prompt_ids=prompt, max_tokens=4, seed=2, temperature=0.5, logprobs_processed=False)
    assert hot.logprobs is None and len(hot.token_ids) == 4
    plain = _gen(srv.url, prompt_ids=prompt, max_tokens=4, seed=2, logprobs_processed=False)
    assert plain.logprobs is not None  # at T = 1 and top-p = 1 raw and processed agree


def test_unknown_model_is_an_error_at_once(fake, tok, model):
    srv = fake(model=model)
    with pytest.raises(VLLMError, match="does not exist"):
        _gen(srv.url, name="nope", prompt_ids=[1, 2], max_tokens=2, retries=3)
    assert sum(1 for _, p, _ in srv.calls if p == "/v1/completions") == 1  # a 4xx is not retried


def test_unreachable_server_is_retried_then_reported():
    with pytest.raises(VLLMError, match="ConnectError"):
        _gen("http://127.0.0.1:9", prompt_ids=[1], max_tokens=1, retries=1)


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("0.10.2", True),
        ("0.11.0rc1", True),
        ("0.33.0", True),
        ("0.10.1", False),
        ("0.34.0", False),
        ("1.0", False),
    ],
)
def test_version_gate(fake, model, version, ok):
    srv = fake(model=model, version=version)

    async def go():
        async with VLLMClient(srv.url, "policy") as c:
            return await c.check_version()

    if ok:
        assert asyncio.run(go()) == version
    else:
        with pytest.raises(VLLMVersionError, match=r"vllm>=0\.10\.2,<0\.34\.0") as e:
            asyncio.run(go())
        assert isinstance(e.value, ConfigError) and version in str(e.value)


def test_version_parsing():
    assert parse_version("0.12.0.dev5+g1234") == (0, 12, 0)
    assert parse_version("v0.9") == (0, 9, 0)
    with pytest.raises(VLLMVersionError, match="not a version"):
        parse_version("unknown")
    assert check_version(".".join(map(str, SUPPORTED_VLLM[0]))) == SUPPORTED_VLLM[0]
    assert server_root("http://h:8000/v1/") == "http://h:8000" == server_root("http://h:8000")
