"""The in-process tokenizer of tiny models: short tokens split names into pieces other names share."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.train.tokenizer import bounded_corpus, train_chat_tokenizer

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


def test_a_multi_megabyte_word_trains_in_seconds_not_minutes():
    # Before the corpus was bounded this ran for minutes (the BPE trainer is quadratic in a word's
    # length and deaf to Ctrl-C); a child process keeps a regression from hanging the suite.
    code = (
        "from agentrl.train.tokenizer import train_chat_tokenizer\n"
        "tok = train_chat_tokenizer(['hello world, revenue rose'] * 20 + ['x' * 3_000_000], 512)\n"
        "assert tok.decode(tok('xxxxxxxx hello')['input_ids']) == 'xxxxxxxx hello'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="ab \n", max_size=60), max_size=5), st.integers(1, 8), st.integers(1, 30))
def test_the_bounded_corpus_is_the_texts_cut_at_their_limits(texts, run, cap):
    pieces = list(bounded_corpus(texts, max_text_chars=cap, max_run_chars=run))
    assert "".join(pieces) == "".join(t[:cap] for t in texts)
    assert all(len(w) <= run for p in pieces for w in p.split())


def test_decimal_tokens_keep_a_decimal_point_with_its_digit_and_decode_to_the_text():
    import random

    rng = random.Random(0)
    texts = [
        f"Revenue for Q1 2022 was ${rng.randint(1, 99)}.{rng.randint(0, 9)} billion." for _ in range(300)
    ]
    text = "Total revenue for Q3 2024 was $41.7 billion, up 3.5% (see v1.2). It's fine"
    pieces = {}
    for decimal in (False, True):
        tok = train_chat_tokenizer(texts, 400, decimal_tokens=decimal)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text
        pieces[decimal] = [tok.decode([i]) for i in ids]
    assert ".7" in pieces[True] and ".5" in pieces[True] and "." not in pieces[True][:12]
    assert ".7" not in pieces[False] and pieces[False][pieces[False].index("41") + 1] == "."
