"""sampled_message: a sampled turn keeps its ids and logprobs as sampled; the text drops the stop token."""

import pytest

from agentrl.tokens import sampled_message


def test_stop_token_kept_in_ids_dropped_from_text(chatml):
    stop = chatml.convert_tokens_to_ids("<|im_end|>")
    body = chatml.encode("The answer is 4.", add_special_tokens=False)
    msg = sampled_message(chatml, [*body, stop], [-0.5] * (len(body) + 1), "stop", {stop})
    assert msg.role == "assistant" and msg.finish_reason == "stop"
    assert msg.token_ids == [*body, stop] and msg.logprobs == [-0.5] * (len(body) + 1)
    assert msg.content == chatml.decode(body, skip_special_tokens=False)
    assert "<|im_end|>" not in msg.content


def test_a_turn_cut_at_the_length_limit_keeps_all_its_text(chatml):
    stop = chatml.convert_tokens_to_ids("<|im_end|>")
    body = chatml.encode("unfinished", add_special_tokens=False)
    msg = sampled_message(chatml, body, None, "length", {stop})
    assert msg.content == chatml.decode(body, skip_special_tokens=False) and msg.logprobs is None


def test_logprobs_must_match_the_ids(chatml):
    with pytest.raises(ValueError, match="2 logprobs for 3"):
        sampled_message(chatml, [5, 6, 7], [-1.0, -1.0], "length", set())
