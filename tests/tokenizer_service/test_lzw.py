"""LZW over token ids (zip2zip): round trips, M = 1 is the identity, nested hypertokens, the
codebook in creation order, contexts."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import read_corpus
from tokenizer_service.lzw import LZW, Codebook, contexts

IDS = st.lists(st.integers(min_value=0, max_value=5), max_size=300)


@settings(max_examples=300, deadline=None)
@given(ids=IDS, max_merge=st.integers(min_value=1, max_value=6))
def test_decoding_restores_the_base_ids(ids, max_merge):
    lzw = LZW(base_size=6, max_merge=max_merge)
    codes = lzw.encode(ids)
    assert lzw.decode(codes) == ids
    book = lzw.codebook(codes)
    assert all(2 <= len(run) <= max_merge for run in book) and len(set(book)) == len(book)
    assert all(code < 6 + len(book) for code in codes)  # ids follow the base vocabulary, in creation order
    assert len(codes) <= len(ids)


@settings(max_examples=300, deadline=None)
@given(ids=IDS, max_merge=st.integers(min_value=1, max_value=6))
def test_the_codebook_read_a_code_at_a_time_knows_what_the_encoder_knew(ids, max_merge):
    """Before each code, the codebook a decoder holds names the code (an entry, a base id or the
    new one), and the code never starts with a token the encoder would have taken into the run
    before: what lets a generator emit only codes the encoder itself would have made."""
    lzw = LZW(base_size=6, max_merge=max_merge)
    codes = lzw.encode(ids)
    book = Codebook(lzw)
    for code in codes:
        first = (
            book.entries[code - 6][0]
            if 6 <= code < 6 + len(book.entries)
            else (book.new[0] if code == 6 + len(book.entries) else code)
        )
        assert first not in book.continuing
        assert code < 6 or code - 6 < len(book.entries) or (code - 6 == len(book.entries) and book.new is not None)
        run = book.read(code)
        assert run[0] == first
    assert book.entries == lzw.codebook(codes)


@given(ids=IDS)
def test_a_merge_size_of_one_is_the_identity(ids):
    assert LZW(base_size=6, max_merge=1).encode(ids) == ids


def test_hypertokens_nest_and_the_codebook_follows_creation_order():
    lzw = LZW(base_size=3, max_merge=4)
    codes = lzw.encode([0, 1, 0, 1, 0, 1, 0, 1, 2])
    # 3=(0 1) 4=(1 0) 5=(0 1 0) 6=(0 1 0 1) ...: hypertokens made of hypertokens
    assert lzw.codebook(codes)[:4] == [(0, 1), (1, 0), (0, 1, 0), (0, 1, 0, 1)]
    assert codes == [0, 1, 3, 5, 1, 2]


def test_an_id_that_names_no_hypertoken_yet_is_refused():
    with pytest.raises(ValueError, match="names no hypertoken yet"):
        LZW(base_size=3).decode([0, 7])


def test_real_documents_round_trip_and_shrink():
    docs = read_corpus("data/git-commits-sample.jsonl.gz").texts[:400]
    tokenizer = BPETokenizer.train(docs, vocab_size=1000)
    ids = tokenizer.encode_batch(docs)
    for max_merge in (1, 2, 3, 5):
        lzw = LZW(base_size=tokenizer.id_space, max_merge=max_merge)
        windows = contexts(ids, context=1024)
        encoded = [lzw.encode(w) for w in windows]
        assert [lzw.decode(e) for e in encoded] == windows
        tokens, hypertokens = sum(map(len, windows)), sum(map(len, encoded))
        assert (hypertokens == tokens) if max_merge == 1 else (hypertokens < tokens)


def test_contexts_cut_the_concatenated_ids_or_keep_documents_whole():
    docs = [[1, 2, 3], [], [4, 5, 6, 7]]
    assert contexts(docs, context=3) == [[1, 2, 3], [4, 5, 6], [7]]
    assert contexts(docs, context=0) == [[1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError):
        contexts(docs, context=-1)


def test_the_hypertokens_formed_most_often_are_the_merges_ted_tok_adds_next():
    """On a stream drifting to new words, the pairs LZW forms in the most documents before Ted-Tok's
    first revision hold most of the merges that revision adds, far more than chance would: a
    merge signal for the stream (three streams)."""
    from tests.conftest import NEW_WORDS, WORDS, sentences
    from tokenizer_service.lzw import hypertoken_counts
    from tokenizer_service.tedtok import TedTok, TedTokConfig

    initial = BPETokenizer.train(sentences(300), vocab_size=320)
    found = wanted = 0
    for seed in (0, 100, 200):
        tedtok = TedTok(initial, config=TedTokConfig(alpha=0.3, batch_size=10, interval=2))
        seen: list[str] = []
        while not tedtok.revisions:
            texts = sentences(20, seed=seed + len(seen), words=NEW_WORDS + WORDS[:3])
            seen += texts
            tedtok.observe_texts(texts)
        adds = {tuple(e.parents) for e in tedtok.revisions[0].diff.entries if e.new_token is not None}
        counts = hypertoken_counts(initial.encode_batch(seen), LZW(base_size=initial.id_space, max_merge=2))
        top = {pair for pair, _ in counts.most_common(len(adds))}
        chance = len(adds) * len(adds) / len(counts)  # K pairs drawn from all those formed
        assert len(top & adds) >= 3 * chance
        found, wanted = found + len(top & adds), wanted + len(adds)
    assert found >= 0.6 * wanted
