import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from schemas.revision import RevisionDiff
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.litetoken import count_corpus, find_residues, score_tokens
from tokenizer_service.merge_graph import MergeGraph
from tokenizer_service.residue_removal import SplitRemerge, residue_free_tokenizer
from tokenizer_service.validation import validate

WS = {"pre_tokenizer": {"type": "WhitespaceSplit"}, "decoder": {"type": "Fuse"}}


def corruptions() -> BPETokenizer:
    """LiteToken Table 3's first row in miniature: "_cor ruptions" should become "_corruption s"."""
    merges = [
        ("r", "u"),
        ("p", "t"),
        ("i", "o"),
        ("io", "n"),
        ("ion", "s"),
        ("pt", "ions"),
        ("ru", "ptions"),
        ("_", "c"),
        ("_c", "o"),
        ("_co", "r"),
        ("_cor", "ru"),
        ("pt", "ion"),
        ("_corru", "ption"),
    ]
    alphabet = sorted(set("_corruptions"))
    vocab = {t: i for i, t in enumerate(alphabet + [a + b for a, b in merges])}
    return BPETokenizer(vocab=vocab, merges=merges, pipeline=WS)


def names(tok: BPETokenizer, ids: list[int]) -> list[str]:
    return [tok.id_to_token[i] for i in ids]


def test_table_3_analogue_split_then_remerge_into_better_tokens():
    tok = corruptions()
    assert names(tok, tok.encode("_corruptions")) == ["_cor", "ruptions"]
    residues = ["ruptions", "ptions", "ions"]
    lite = SplitRemerge(tok, residues).encode_batch(["_corruptions"])[0]
    assert lite.split_tokens == 5  # _cor ru pt ion s
    assert names(tok, lite.ids) == ["_corruption", "s"]
    exported = residue_free_tokenizer(tok, residues).tokenizer
    assert names(tok, exported.encode("_corruptions")) == ["_corruption", "s"]


def test_split_goes_down_the_merges_actually_applied():
    tok = BPETokenizer(
        vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
        merges=[("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c")],
        pipeline=WS,
    )
    # abc forms as ab + c (ab has rank 0), so splitting abc gives ab, c, not a, bc.
    assert SplitRemerge(tok, ["abc"]).split("abc") == ["ab", "c"]


def test_a_token_that_needs_a_residue_keeps_it_as_scaffolding():
    tok = BPETokenizer(vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, merges=[("a", "b"), ("ab", "c")], pipeline=WS)
    removal = residue_free_tokenizer(tok, ["ab"])
    assert removal.scaffolding == ["ab"] and removal.removed == []
    assert removal.tokenizer.vocab == tok.vocab


def test_rewired_merge_keeps_the_token_reachable_and_ids_stay():
    tok = BPETokenizer(
        vocab={"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
        merges=[("a", "b"), ("b", "c"), ("ab", "c")],
        pipeline=WS,
    )
    removal = residue_free_tokenizer(tok, ["ab"])
    assert removal.rewired == ["abc"] and ("a", "bc") in removal.tokenizer.merges
    assert removal.tokenizer.vocab == {"a": 0, "b": 1, "c": 2, "bc": 4, "abc": 5}  # id 3 is a hole
    assert removal.tokenizer.encode("abc ab") == [5, 0, 1]


def test_removal_is_an_ordinary_revision_diff():
    tok = corruptions()
    removal = residue_free_tokenizer(tok, ["ruptions", "ptions", "ions"])
    entries = {e.old_token: e for e in removal.entries}
    assert set(entries) == {"ruptions", "ptions", "ions"}
    e = entries["ruptions"]
    assert e.kind == "removed" and e.new_token is None and e.parents == [tok.vocab["ru"], tok.vocab["ptions"]]
    diff = RevisionDiff(
        lineage="t",
        version=2,
        parent_version=1,
        tokenizer_sha256=removal.tokenizer.sha256,
        vocab_size=len(removal.tokenizer),
        entries=removal.entries,
        config={},
    )
    assert RevisionDiff.from_dict(json.loads(diff.to_json())) == diff


def test_base_tokens_cannot_be_residues():
    tok = corruptions()
    with pytest.raises(ValueError, match="base"):
        SplitRemerge(tok, ["r"])
    with pytest.raises(ValueError, match="base"):
        residue_free_tokenizer(tok, ["r"])


@pytest.fixture(scope="module")
def scored(byte_tokenizer, corpus):
    """A byte-level tokenizer with residues found on its own corpus (loose thresholds: many)."""
    graph = MergeGraph(byte_tokenizer)
    scores = score_tokens(byte_tokenizer, count_corpus(byte_tokenizer, corpus), graph=graph)
    residues = find_residues(byte_tokenizer, scores, graph=graph, r=0.5, s=3.0).residues
    assert len(residues) >= 20
    return byte_tokenizer, residues


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=60))
def test_split_remerge_is_lossless_and_never_emits_a_residue(scored, text):
    tok, residues = scored
    lite = SplitRemerge(tok, residues)
    ids = lite.encode(text)
    assert tok.decode(ids) == text
    assert not {tok.id_to_token[i] for i in ids} & set(residues)


def test_export_loads_everywhere_and_agrees_with_split_remerge(tmp_path):
    tok = corruptions()
    removal = residue_free_tokenizer(tok, ["ruptions", "ptions", "ions"])
    exported = removal.tokenizer
    assert removal.removed == ["ions", "ptions", "ruptions"] and removal.scaffolding == []
    assert validate(exported, parent=tok).ok
    assert all(tok.vocab[t] == i for t, i in exported.vocab.items())  # survivors keep their ids
    path = tmp_path / "tokenizer.json"
    exported.save(path)
    fast = PreTrainedTokenizerFast(tokenizer_file=str(path))
    rng = random.Random(0)
    words = ["_corruptions", "_corruption", "ruptions", "options", "ions", "_cor", "tips"]
    texts = [
        " ".join(
            rng.choice(words) + "".join(rng.choices("_corruptions", k=rng.randint(0, 3)))
            for _ in range(rng.randint(1, 6))
        )
        for _ in range(300)
    ]
    lite = SplitRemerge(tok, removal.removed).encode_batch(texts)
    via_tokenizers = [e.ids for e in Tokenizer.from_file(str(path)).encode_batch(texts, add_special_tokens=False)]
    assert via_tokenizers == [fast(t, add_special_tokens=False)["input_ids"] for t in texts]
    agreement = sum(a == e.ids for a, e in zip(via_tokenizers, lite)) / len(texts)
    assert agreement >= 0.99
    # Whitespace splitting drops the spaces, so "lossless" here means: decodes like the original.
    assert [tok.decode(e.ids) for e in lite] == [tok.decode(e.original) for e in lite]
