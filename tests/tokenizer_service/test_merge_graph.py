from tokenizer_service import merge_graph
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.merge_graph import MergeGraph, unreachable_tokens
from tokenizer_service.validation import validate


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
    tok = BPETokenizer(
        vocab={"a": 0, "b": 1, "ab": 2, "abb": 3, "bab": 4}, merges=[("a", "b"), ("ab", "b"), ("b", "ab")], pipeline={}
    )
    graph = MergeGraph(tok)
    assert graph.descendants("b") == {"ab", "abb", "bab"}
    assert graph.descendants("abb") == set()
    assert graph.parents["bab"] == ("b", "ab")


def test_trained_tokenizers_are_fully_reachable(byte_tokenizer):
    assert unreachable_tokens(byte_tokenizer) == []


def test_unreachable_token_is_reported():
    tok = BPETokenizer(
        vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
        merges=[("a", "b"), ("b", "c"), ("a", "bc")],
        pipeline={},
    )
    assert unreachable_tokens(tok) == ["abc"]


def test_a_versions_unreachable_tokens_are_found_once_and_handed_out_as_copies():
    tok = BPETokenizer(
        vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
        merges=[("a", "b"), ("b", "c"), ("a", "bc")],
        pipeline={},
    )
    found = unreachable_tokens(tok)
    assert merge_graph._UNREACHABLE[tok] == ("abc",)
    found.append("ab")  # the caller's list: the remembered one stays
    assert unreachable_tokens(tok) == ["abc"] == validate(tok).unreachable
    assert validate(tok.replace_model(vocab=tok.vocab, merges=[*tok.merges, ("ab", "c")])).unreachable == []
