import math
from collections import Counter

import numpy as np
import pytest

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.litetoken import (
    CorpusCounts,
    count_corpus,
    find_residues,
    score_tokens,
    tokenizer_kind,
)
from tokenizer_service.merge_graph import MergeGraph

WS = {"pre_tokenizer": {"type": "WhitespaceSplit"}, "decoder": {"type": "Fuse"}}


def hand_built() -> BPETokenizer:
    # a b c | ab (a+b) | abc (ab+c) | bc (b+c)
    return BPETokenizer(
        vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "bc": 5},
        merges=[("a", "b"), ("ab", "c"), ("b", "c")],
        pipeline=WS,
    )


def test_scores_match_a_hand_count():
    tok = hand_built()
    # "abc abc ab bc" -> abc abc ab bc ; "c abc" -> c abc
    scores = score_tokens(tok, count_corpus(tok, ["abc abc ab bc", "c abc"]), log_base=2)
    # F1: abc 3, ab 1, bc 1, c 1.
    assert scores.f1[:6].tolist() == [0, 0, 1, 1, 3, 1]
    # F2: abc's tree holds ab, c (and a, b through ab); ab's tree a, b; bc's tree b, c.
    # ab: 3 (inside abc); a: 3 + 1 (abc, ab); b: 3 + 1 + 1 (abc, ab, bc); c: 3 + 1 (abc, bc).
    assert scores.f2[:6].tolist() == [4, 5, 4, 3, 0, 0]
    assert scores.ratio[3] == pytest.approx(1 / 4)
    # Neighbours over each document's whole sequence: [abc, abc, ab, bc], [c, abc].
    # abc: left {abc: 1, c: 1} -> 1 bit; right {abc: 1, ab: 1} -> 1 bit.
    assert scores.s_left[4] == pytest.approx(1.0) and scores.s_right[4] == pytest.approx(1.0)
    # ab: left {abc}, right {bc} -> 0; c: no left, right {abc} -> 0.
    assert scores.s[3] == 0.0 and scores.s[2] == 0.0


def test_entropy_log_base_is_an_option():
    tok = hand_built()
    counts = count_corpus(tok, ["abc abc ab bc", "c abc"])
    nats = score_tokens(tok, counts).s_left[4]
    assert nats == pytest.approx(math.log(2))


def brute_force(tok: BPETokenizer, texts: list[str]):
    """F1, F2 and entropies by walking every emitted token's tree and every neighbour pair."""
    graph = MergeGraph(tok)
    f1, f2, left, right = Counter(), Counter(), {}, {}

    def inside(t: str):
        for p in graph.parents.get(t, ()):
            yield p
            yield from inside(p)

    for ids in tok.encode_batch(texts):
        tokens = [tok.id_to_token[i] for i in ids]
        for k, t in enumerate(tokens):
            f1[t] += 1
            f2.update(inside(t))
            if k:
                left.setdefault(t, Counter())[tokens[k - 1]] += 1
                right.setdefault(tokens[k - 1], Counter())[t] += 1

    def entropy(c: Counter | None) -> float:
        if not c:
            return 0.0
        n = sum(c.values())
        return -sum(v / n * math.log(v / n) for v in c.values())

    return f1, f2, {t: entropy(c) for t, c in left.items()}, {t: entropy(c) for t, c in right.items()}


def test_vectorised_scores_equal_a_brute_force_walk(byte_tokenizer, corpus):
    texts = corpus[:120]
    scores = score_tokens(byte_tokenizer, count_corpus(byte_tokenizer, texts, batch_size=7))
    f1, f2, left, right = brute_force(byte_tokenizer, texts)
    for t, i in byte_tokenizer.vocab.items():
        assert scores.f1[i] == f1[t], t
        assert scores.f2[i] == f2[t], t
        assert scores.s_left[i] == pytest.approx(left.get(t, 0.0), abs=1e-12), t
        assert scores.s_right[i] == pytest.approx(right.get(t, 0.0), abs=1e-12), t


def test_f2_follows_the_merge_bpe_applies_not_the_first_listed():
    # Tiktoken style: "abc" is listed as a+bc first, but BPE forms ab first (rank 0), so ab+c wins.
    tok = BPETokenizer(
        vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
        merges=[("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c")],
        pipeline=WS,
    )
    graph = MergeGraph(tok)
    assert graph.parents["abc"] == ("ab", "c") and tokenizer_kind(tok, graph) == "tiktoken"
    scores = score_tokens(tok, count_corpus(tok, ["abc abc"]), graph=graph)
    assert scores.f2[tok.vocab["ab"]] == 2 and scores.f2[tok.vocab["bc"]] == 0


def test_residue_rules_follow_the_definitions():
    tok = BPETokenizer(
        vocab={"a": 0, "b": 1, "c": 2, "é": 3, "ab": 4, "abc": 5, "bc": 6, "cé": 7},
        merges=[("a", "b"), ("ab", "c"), ("b", "c"), ("c", "é")],
        pipeline=WS,
    )
    scores = score_tokens(tok, count_corpus(tok, ["abc"] * 30 + ["ab"]))
    report = find_residues(tok, scores, r=0.1, s=1.0)
    # ab: F1 1, F2 30 -> R 0.03, S 0: a residue. abc: R 1. bc, cé: never seen -> unseen, no residue.
    assert report.residues == ["ab"]
    assert report.ratio_only == ["ab"]
    # Scope: all-ASCII tokens (a, b, c, ab, abc, bc); "é" and "cé" are outside it.
    assert report.scope_size == 6 and report.unseen == 1
    assert report.residue_share == pytest.approx(1 / 6)
    assert find_residues(tok, scores, r=0.1, s=1.0, scope="all").scope_size == 8


def test_token_seen_only_inside_others_has_zero_entropy_and_is_a_residue():
    tok = hand_built()
    scores = score_tokens(tok, count_corpus(tok, ["abc x"] * 3))
    assert scores.f1[3] == 0 and scores.f2[3] == 3 and scores.s[3] == 0
    assert "ab" in find_residues(tok, scores, r=0.05, s=0.5).residues


def test_entropy_filter_spares_tokens_with_varied_neighbours():
    tok = hand_built()
    # ab is emitted between many different neighbours: high entropy on both sides.
    texts = [f"{x} ab {y}" for x, y in zip("abc" * 4, "cba" * 4)] + ["abc"] * 200
    scores = score_tokens(tok, count_corpus(tok, texts))
    report = find_residues(tok, scores, r=0.2, s=0.5)
    assert scores.ratio[3] <= 0.2 and "ab" in report.ratio_only and "ab" not in report.residues


def test_min_count_needs_evidence_before_flagging():
    tok = hand_built()
    texts = ["abc"] * 100 + ["ab c"]  # ab emitted once: S = 0 from a single observation
    scores = score_tokens(tok, count_corpus(tok, texts))
    assert "ab" in find_residues(tok, scores, r=0.1, s=1.0).residues
    evidence = find_residues(tok, scores, r=0.1, s=1.0, min_count="auto")
    assert evidence.min_count == math.ceil(math.e) and "ab" not in evidence.residues
    # Never emitted but seen 100 times inside abc: evidence enough for a residue.
    only_inside = score_tokens(tok, count_corpus(tok, ["abc"] * 100))
    assert "ab" in find_residues(tok, only_inside, r=0.1, s=1.0, min_count="auto").residues


def test_thresholds_default_to_the_papers_by_kind(byte_tokenizer, corpus):
    scores = score_tokens(byte_tokenizer, count_corpus(byte_tokenizer, corpus[:50]))
    report = find_residues(byte_tokenizer, scores)
    assert (report.kind, report.r, report.s) == ("classic", 0.15, 4.0)
    named = find_residues(byte_tokenizer, scores, kind="tiktoken")
    assert (named.kind, named.r, named.s) == ("tiktoken", 0.05, 3.5)
    with pytest.raises(ValueError, match="kind"):
        find_residues(byte_tokenizer, scores, kind="sentencepiece")
    assert not set(report.residues) & byte_tokenizer.base_tokens


def test_counts_merge_across_batches(byte_tokenizer, corpus):
    whole = count_corpus(byte_tokenizer, corpus[:60])
    batched = count_corpus(byte_tokenizer, corpus[:60], batch_size=11)
    assert np.array_equal(whole.emitted, batched.emitted)
    assert np.array_equal(whole.neighbour_keys, batched.neighbour_keys)
    assert np.array_equal(whole.neighbour_counts, batched.neighbour_counts)
    assert CorpusCounts.from_id_lists([], 4).documents == 0
