from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tokenizer_service.counting import StepCounter, WordVocabulary, count_pairs, pack_pair, unpack_pair
from tests.conftest import WORDS
from tests.support.tokenizer_files import MODEL_EDITS
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


def texts_of(*pieces: str) -> st.SearchStrategy[list[str]]:
    """One to twenty texts, each of up to 30 pieces: a few odd characters (a newline, an emoji, an
    accent), ``pieces`` and the corpus's words.

    >>> from hypothesis import find
    >>> find(texts_of("<eos>"), lambda texts: "<eos>" in texts[0])
    ['<eos>']
    """
    return st.lists(
        st.lists(st.sampled_from([*"abc xyz.!\n🙂é", *pieces, *WORDS]), max_size=30).map("".join),
        min_size=1,
        max_size=20,
    )


def test_words_split_under_an_earlier_version_count_as_the_texts_do():
    """``count_texts(words=…)``: a step split into words under the parent (while its version was
    made) counts with each revision as the texts themselves do."""
    from tests.conftest import NEW_WORDS, sentences, tedtok_lineage

    initial, revisions = tedtok_lineage(seed=3, steps=14)
    texts = sentences(80, seed=11) + sentences(80, seed=12, words=NEW_WORDS + ["stream"])
    counter = StepCounter(initial)
    for revision in revisions:
        words = counter.word_sequences(texts)
        counter.set_tokenizer(revision.tokenizer)
        assert _counts_equal(
            counter.count_texts(texts, neighbours=True, words=words),
            StepCounter(revision.tokenizer).count_texts(texts, neighbours=True),
        )


@settings(max_examples=40, deadline=None)
@given(texts_of())
def test_counts_match_brute_force(byte_tokenizer, texts):
    counts = StepCounter(byte_tokenizer).count_texts(texts)
    tokens, pairs = brute_force(byte_tokenizer, texts)
    assert dict(zip(counts.token_ids.tolist(), counts.token_counts.tolist())) == tokens
    assert {unpack_pair(k): c for k, c in zip(counts.pair_keys.tolist(), counts.pair_counts.tolist())} == pairs
    assert counts.n_tokens == sum(tokens.values())
    assert counts.n_bytes == sum(len(t.encode()) for t in texts)


@settings(max_examples=40, deadline=None)
@given(texts_of("<eos>"))
def test_neighbours_are_the_encodings_adjacent_pairs(special_tokenizer, texts):
    """Neighbours from the word encodings equal the adjacent pairs of ``encode_batch`` (a
    document holding an added token's text is encoded whole, as the library matches it first)."""
    counts = StepCounter(special_tokenizer).count_texts(texts, neighbours=True)
    expected = Counter(pair for ids in special_tokenizer.encode_batch(texts) for pair in zip(ids, ids[1:]))
    assert {
        unpack_pair(k): c for k, c in zip(counts.neighbour_keys.tolist(), counts.neighbour_counts.tolist())
    } == expected


@settings(max_examples=40, deadline=None)
@given(texts_of("<eos>"), st.integers(1, 4))
def test_a_step_counted_in_parts_and_added_counts_as_its_texts(special_tokenizer, texts, parts):
    """A step's documents counted in parts, each by a counter of its own (as the Flink job's
    counting subtasks do), then added: exactly ``count_texts``'s tokens, pairs, sizes and
    neighbours over the whole step."""
    from tokenizer_service.counting import add_counts

    got = add_counts(
        [StepCounter(special_tokenizer).count_texts(texts[k::parts], neighbours=True) for k in range(parts)]
    )
    assert _counts_equal(got, StepCounter(special_tokenizer).count_texts(texts, neighbours=True))
    assert got.n_bytes == sum(len(t.encode()) for t in texts)


@settings(max_examples=40, deadline=None)
@given(texts_of("<eos>"), st.integers(0, 40))
def test_a_tally_counts_as_its_texts(special_tokenizer, texts, seen):
    """``tally_texts`` gives ``count_texts``'s counts, and its tally, counted by another counter
    (one that has seen other words: its word ids differ), gives them again, documents with an
    added token's text included."""
    from tests.conftest import WORDS

    counter = StepCounter(special_tokenizer)
    counts, tally = counter.tally_texts(texts)
    expected = StepCounter(special_tokenizer).count_texts(texts, neighbours=True)
    assert _counts_equal(counts, expected)
    other = StepCounter(special_tokenizer)
    other.count_texts([" ".join(WORDS[seen:])], neighbours=True)
    assert _counts_equal(other.count_tally(tally), expected)


def test_a_tally_made_before_a_revision_counts_with_the_revision():
    """What the Flink job's writer does with a part counted before its revision: the tally made
    with each version, counted with the next, equals the texts counted afresh with the next."""
    from tests.conftest import NEW_WORDS, sentences, tedtok_lineage

    initial, revisions = tedtok_lineage(seed=3, steps=14)
    texts = sentences(80, seed=13) + sentences(80, seed=14, words=NEW_WORDS + ["stream"])
    before, writer = StepCounter(initial), StepCounter(initial)
    for revision in revisions:
        tally = before.tally_texts(texts)[1]
        writer.set_tokenizer(revision.tokenizer)
        assert _counts_equal(
            writer.count_tally(tally), StepCounter(revision.tokenizer).count_texts(texts, neighbours=True)
        )
        before.set_tokenizer(revision.tokenizer)


@given(st.integers(1, 300), st.integers(0, 2_000), st.integers(0, 2**32 - 1))
def test_pairs_counted_by_a_bincount_or_a_sort_are_the_same_floats(id_space, n, seed):
    """Few ids for many pairs take the bincount, the rest np.unique's sort: the keys in the same
    order, the sums bit for bit."""
    rng = np.random.default_rng(seed)
    left, right = rng.integers(0, id_space, n), rng.integers(0, id_space, n)
    weights = rng.random(n) * rng.choice([1.0, 1e-9, 1e9], n)
    keys, sums = count_pairs(left, right, weights)
    expected_keys, inverse = np.unique(pack_pair(left, right), return_inverse=True)
    assert keys.tolist() == expected_keys.tolist()
    assert sums.tobytes() == np.bincount(inverse, weights=weights, minlength=len(expected_keys)).tobytes()


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


def _counts_equal(a, b) -> bool:
    return all(
        np.array_equal(getattr(a, f), getattr(b, f))
        for f in ("token_ids", "token_counts", "pair_keys", "pair_counts", "neighbour_keys", "neighbour_counts")
    ) and (a.n_bytes, a.n_tokens) == (b.n_bytes, b.n_tokens)


def test_a_revision_keeps_the_encodings_it_cannot_change():
    """Through a lineage's revisions (merges appended, sinks deleted, ids recycled), a counter
    switched to each version counts as a fresh one does, and keeps most encodings."""
    from tests.conftest import NEW_WORDS, sentences, tedtok_lineage
    from tokenizer_service.counting import encoding_change

    initial, revisions = tedtok_lineage(seed=3, steps=14)
    assert len(revisions) >= 3 and any(r.removed for r in revisions)
    texts = sentences(80, seed=9) + sentences(80, seed=10, words=NEW_WORDS + ["stream", "token"])
    counter, previous = StepCounter(initial), initial
    counter.count_texts(texts, neighbours=True)
    for revision in revisions:
        assert encoding_change(previous, revision.tokenizer) is not None
        counter.set_tokenizer(revision.tokenizer)
        kept = int((counter._len >= 0).sum())
        assert 0 < kept < len(counter.words)  # some words changed, the others were kept
        assert _counts_equal(
            counter.count_texts(texts, neighbours=True),
            StepCounter(revision.tokenizer).count_texts(texts, neighbours=True),
        )
        previous = revision.tokenizer


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(MODEL_EDITS),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
)
def test_any_other_change_of_version_counts_as_a_fresh_counter(corpus, byte_tokenizer, edit, a, b):
    """Edits that are not Ted-Tok revisions (merges reordered, ids moved, tokens dropped or added,
    ``ignore_merges``): the switched counter still equals a fresh one."""
    import json

    from tests.conftest import edit_tokenizer_model

    try:
        edited = BPETokenizer.from_data(edit_tokenizer_model(json.loads(byte_tokenizer.to_json()), edit, a, b))
        fresh = StepCounter(edited).count_texts(corpus[:60], neighbours=True)
    except Exception:  # an edit tokenizers cannot load
        return
    counter = StepCounter(byte_tokenizer)
    counter.count_texts(corpus[:60], neighbours=True)
    counter.set_tokenizer(edited)
    assert _counts_equal(counter.count_texts(corpus[:60], neighbours=True), fresh)


@pytest.mark.parametrize("ignore_merges", [False, True])
def test_a_word_that_becomes_a_token_is_encoded_again_with_ignore_merges(ignore_merges):
    """ "abc" keeps [ab, c] under plain BPE (no new merge applies to it), but with
    ``ignore_merges`` a word that is a token is that token, whatever its old encoding."""
    old = BPETokenizer(
        vocab={"a": 0, "b": 1, "c": 2, "ab": 3},
        merges=[("a", "b")],
        pipeline={"pre_tokenizer": {"type": "WhitespaceSplit"}},
        model_options={"ignore_merges": ignore_merges},
    )
    new = old.replace_model(vocab={**old.vocab, "bc": 4, "abc": 5}, merges=[("a", "b"), ("b", "c"), ("a", "bc")])
    texts = ["abc bc abc", "cab"]
    counter = StepCounter(old)
    counter.count_texts(texts)
    counter.set_tokenizer(new)
    counts = counter.count_texts(texts, neighbours=True)
    assert _counts_equal(counts, StepCounter(new).count_texts(texts, neighbours=True))
    assert (5 in counts.token_ids.tolist()) == ignore_merges
