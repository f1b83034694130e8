"""The in-process tokenizer of tiny models: short tokens split names into pieces other names share."""

from __future__ import annotations

from agentrl.train.tokenizer import train_chat_tokenizer

# Made-up company names built from shared syllables, as the sandbox builds them.
TRAIN = ["Velatek", "Korionline", "Zanexmark", "Miravox", "Talagrid", "Velionfold", "Korastek", "Zanilume"]
TEXTS = [
    f"{n} Systems announced revenue of $12.3 billion. {n} results: https://ir.{n.lower()}.example/q1"
    for n in TRAIN
] * 40


def test_a_limit_keeps_every_token_short_and_splits_names_into_shared_pieces():
    free = train_chat_tokenizer(TEXTS, vocab_size=400)
    short = train_chat_tokenizer(TEXTS, vocab_size=400, max_token_length=4)
    # without a limit, frequent names become tokens of their own: a model can only recall those
    assert any(len(free.convert_ids_to_tokens([i])[0].lstrip("Ġ")) > 6 for i in free(" Velatek")["input_ids"])
    lengths = [len(t.lstrip("Ġ")) for t in short.get_vocab() if not t.startswith("<")]
    assert max(lengths) <= 4
    # a name never seen is made of pieces the training names also use
    seen = {short.convert_ids_to_tokens([i])[0] for n in TRAIN for i in short(" " + n)["input_ids"]}
    unseen = short.convert_ids_to_tokens(short(" Zanatek")["input_ids"])
    assert len(unseen) > 1 and set(unseen) <= seen
    assert short.decode(short(" Zanatek Systems")["input_ids"]) == " Zanatek Systems"
