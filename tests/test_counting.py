from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tokenizer_service.counting import StepCounter, WordVocabulary, pack_pair, unpack_pair
from tests.conftest import WORDS
from tokenizer_service.bpe import BPETokenizer


@pytest.fixture(scope="module")
def special_tokenizer(corpus) -> BPETokenizer:
    return BPETokenizer.train(corpus, vocab_size=320, special_tokens=["<eos>"])


def brute_force(tokenizer, texts):
    """Token and within-word pair counts by encoding every word occurrence separately."""
    tokens, pairs = Counter(), Counter()
    for text in texts:
        for word in tokenizer.pre_tokenize(text):
            ids = tokenizer.tokenize_word(word)
            tokens.update(ids)
            pairs.update(zip(ids, ids[1:]))
    return tokens, pairs


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from([*"abc xyz.!\n🙂é", *WORDS]), max_size=30).map("".join),
                min_size=1, max_size=20))
def test_counts_match_brute_force(byte_tokenizer, texts):
    counts = StepCounter(byte_tokenizer).count_texts(texts)
    tokens, pairs = brute_force(byte_tokenizer, texts)
    assert dict(zip(counts.token_ids.tolist(), counts.token_counts.tolist())) == tokens
    assert {unpack_pair(k): c for k, c in zip(counts.pair_keys.tolist(), counts.pair_counts.tolist())} == pairs
    assert counts.n_tokens == sum(tokens.values())
    assert counts.n_bytes == sum(len(t.encode()) for t in texts)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from([*"abc xyz.!\n🙂é", "<eos>", *WORDS]), max_size=30).map("".join),
                min_size=1, max_size=20))
def test_neighbours_are_the_encodings_adjacent_pairs(special_tokenizer, texts):
    """Neighbours from the word encodings equal the adjacent pairs of ``encode_batch`` (a
    document holding an added token's text is encoded whole, as the library matches it first)."""
    counts = StepCounter(special_tokenizer).count_texts(texts, neighbours=True)
    expected = Counter(pair for ids in special_tokenizer.encode_batch(texts) for pair in zip(ids, ids[1:]))
    assert {unpack_pair(k): c for k, c in zip(counts.neighbour_keys.tolist(),
                                              counts.neighbour_counts.tolist())} == expected


def test_pairs_never_cross_word_boundaries(byte_tokenizer):
    counts = StepCounter(byte_tokenizer).count_texts(["stream stream"])
    stream = byte_tokenizer.tokenize_word("stream")
    spaced = byte_tokenizer.tokenize_word("Ġstream")
    crossing = pack_pair(stream[-1], spaced[0])
    assert crossing not in counts.pair_keys.tolist()


def test_frequent_words_are_counted_once_and_weighted(byte_tokenizer):
    words = WordVocabulary()
    counter = StepCounter(byte_tokenizer, words)
    ids = words.ids(["Ġstream", "Ġdrift"])
    counts = counter.count_words(ids, np.array([1000.0, 1.0]))
    single = counter.count_words(ids[:1], np.array([1.0]))
    assert counts.n_tokens == 1000 * single.n_tokens + len(byte_tokenizer.tokenize_word("Ġdrift"))


def test_cache_follows_the_tokenizer_version(byte_tokenizer):
    from tokenizer_service.bpe import BPETokenizer

    other = BPETokenizer.train(["zebra zebra"] * 5, vocab_size=262)
    counter = StepCounter(byte_tokenizer)
    counter.count_texts(["zebra stream"])
    counter.set_tokenizer(other)
    counts = counter.count_texts(["zebra stream"])
    assert counts.n_tokens == sum(len(other.tokenize_word(w)) for w in other.pre_tokenize("zebra stream"))
