import json

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.validation import InvalidTokenizer, probe_texts, validate

import pytest


def test_valid_tokenizer_passes(byte_tokenizer):
    report = validate(byte_tokenizer, parent=byte_tokenizer)
    assert report.ok and report.probes >= 100 and report.unreachable == []
    report.raise_for_reasons()


def test_missing_byte_is_refused(byte_tokenizer):
    vocab = dict(byte_tokenizer.vocab)
    del vocab["Ā"]  # byte 0x00
    report = validate(byte_tokenizer.replace_model(vocab=vocab, merges=byte_tokenizer.merges))
    assert any("byte alphabet incomplete" in r for r in report.reasons)
    with pytest.raises(InvalidTokenizer, match="alphabet"):
        report.raise_for_reasons()


def test_merge_outside_vocabulary_is_refused(byte_tokenizer):
    bad = byte_tokenizer.replace_model(vocab=byte_tokenizer.vocab, merges=[*byte_tokenizer.merges, ("q", "z")])
    assert any("outside the vocabulary" in r for r in validate(bad).reasons)


def test_lossy_tokenizer_is_refused(byte_tokenizer):
    data = json.loads(byte_tokenizer.to_json())
    data["normalizer"] = {"type": "Lowercase"}
    report = validate(BPETokenizer.from_json(json.dumps(data)))
    assert any("lossy" in r for r in report.reasons)


def test_unloadable_tokenizer_is_refused(byte_tokenizer):
    data = json.loads(byte_tokenizer.to_json())
    data["pre_tokenizer"] = {"type": "NoSuchPreTokenizer"}
    report = validate(BPETokenizer.from_json(json.dumps(data)))
    assert any("does not load" in r for r in report.reasons)


def test_reachability_regression_against_parent():
    parent = BPETokenizer(vocab={"a": 0, "b": 1, "c": 2, "bc": 3, "abc": 4},
                          merges=[("b", "c"), ("a", "bc")], pipeline={"decoder": {"type": "Fuse"}})
    # Adding ("a", "b") first steals "ab" and makes "abc" unreachable.
    child = parent.replace_model(vocab={**parent.vocab, "ab": 5}, merges=[("a", "b"), *parent.merges])
    report = validate(child, parent=parent, probes=["abc", "cab"])
    assert any("became unreachable" in r for r in report.reasons)


def test_probes_cover_the_alphabet_of_character_tokenizers():
    tok = BPETokenizer.train(["12+3=15"] * 4, vocab_size=12, byte_level=False)
    probes = probe_texts(tok, n=30)
    assert set("".join(probes)) <= set("12+3=5")
    assert validate(tok).ok


def test_an_added_token_that_is_a_byte_level_token_of_other_bytes_is_refused(byte_tokenizer):
    """Marking the byte-level token "ü" (byte 0xFC) as an added token makes the text "ü" (two UTF-8
    bytes) encode to it and decode to the lone byte 0xFC: lossy, though no probe need contain "ü"."""
    data = json.loads(byte_tokenizer.to_json())
    data["added_tokens"].append({"id": data["model"]["vocab"]["ü"], "content": "ü", "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    tokenizer = BPETokenizer.from_json(json.dumps(data))
    assert tokenizer.decode(tokenizer.encode("ü")) != "ü"
    assert "1 added tokens mean other bytes as byte-level tokens, e.g. ['ü']" in validate(tokenizer).reasons
    assert validate(byte_tokenizer).ok
