import functools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import edit_tokenizer_model
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.merge_graph import MergeGraph, unreachable_tokens


def test_sinks_are_merged_tokens_without_children(byte_tokenizer):
    graph = MergeGraph(byte_tokenizer)
    used = {t for m in byte_tokenizer.merges for t in m}
    expected = {a + b for a, b in byte_tokenizer.merges} - used
    assert graph.sink_tokens == expected
    assert not graph.sink_tokens & byte_tokenizer.base_tokens


def test_base_tokens_are_never_sinks():
    # "a" parents nothing and no merge produces it: a base token, not a sink.
    tok = BPETokenizer(vocab={"a": 0, "b": 1, "c": 2, "bc": 3}, merges=[("b", "c")], pipeline={})
    assert MergeGraph(tok).sink_tokens == {"bc"}


def test_descendants_follow_every_merge_tree():
    tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2, "abb": 3, "bab": 4},
                       merges=[("a", "b"), ("ab", "b"), ("b", "ab")], pipeline={})
    graph = MergeGraph(tok)
    assert graph.descendants("b") == {"ab", "abb", "bab"}
    assert graph.descendants("abb") == set()
    assert graph.parents["bab"] == ("b", "ab")


def test_trained_tokenizers_are_fully_reachable(byte_tokenizer):
    assert unreachable_tokens(byte_tokenizer) == []


def test_unreachable_token_is_reported():
    tok = BPETokenizer(vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
                       merges=[("a", "b"), ("b", "c"), ("a", "bc")], pipeline={})
    assert unreachable_tokens(tok) == ["abc"]


@settings(max_examples=80, deadline=None)
@given(edits=st.lists(st.tuples(st.sampled_from(["drop merge", "repeat merge", "swap merges", "swap ids",
                                                 "move id into a hole", "drop token", "add token", "ignore_merges"]),
                                st.integers(0, 10**4), st.integers(0, 10**4)), min_size=1, max_size=4))
def test_incremental_reachability_equals_encoding_every_token(edits):
    """Re-encoding only the tokens a change can act on gives exactly the full answer, for hand
    edits (merges dropped, repeated or reordered, ids moved, tokens added or dropped)."""
    parent = _parent_for_edits()
    data = json.loads(parent.to_json())
    for edit, a, b in edits:
        data = edit_tokenizer_model(data, edit, a, b)
    try:
        child = BPETokenizer.from_json(json.dumps(data))
        expected = unreachable_tokens(child)
    except Exception:  # an edit the tokenizers library will not load: nothing to compare
        return
    assert unreachable_tokens(child, parent=parent, parent_unreachable=unreachable_tokens(parent)) == expected


@functools.cache
def _parent_for_edits() -> BPETokenizer:
    return BPETokenizer.train(["low lower lowest newer wider", "ab abc abd"] * 3, vocab_size=275)


def test_incremental_reachability_through_a_tedtok_run(byte_tokenizer):
    from tests.conftest import NEW_WORDS, sentences
    from tokenizer_service.tedtok import TedTok, TedTokConfig

    tedtok = TedTok(byte_tokenizer, config=TedTokConfig(alpha=0.3, batch_size=6, interval=2))
    parent, unreachable = byte_tokenizer, unreachable_tokens(byte_tokenizer)
    for step in range(20):
        revision = tedtok.observe_texts(sentences(20, seed=step, words=NEW_WORDS))
        if revision is not None:
            child = revision.tokenizer
            fast = unreachable_tokens(child, parent=parent, parent_unreachable=unreachable)
            assert fast == unreachable_tokens(child)
            parent, unreachable = child, fast
    assert tedtok.revisions
