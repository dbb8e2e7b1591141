import functools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from tokenizer_service.bpe import BPETokenizer, jaccard_distance
from tokenizer_service.validation import load_tokenizer, probe_texts


def test_export_encodes_like_the_source(byte_tokenizer, corpus, tmp_path):
    path = tmp_path / "tokenizer.json"
    byte_tokenizer.save(path)
    reloaded = load_tokenizer(path)
    hf = Tokenizer.from_file(str(path))
    fast = PreTrainedTokenizerFast(tokenizer_file=str(path))
    texts = corpus[:50] + probe_texts(byte_tokenizer, n=100)
    expected = byte_tokenizer.encode_batch(texts)
    assert reloaded.encode_batch(texts) == expected
    assert [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)] == expected
    assert [fast(t, add_special_tokens=False)["input_ids"] for t in texts] == expected


@pytest.mark.parametrize("edit", ["none", "ignore_merges and NFC", "an added token in a hole"])
def test_the_model_built_from_objects_is_the_file_parsed(byte_tokenizer, sp_tokenizer, edit):
    """``hf`` is built from the vocabulary and merges, yet serializes (added tokens' ids included)
    exactly as ``tokenizers`` parses the exported file."""
    for tokenizer in (byte_tokenizer, sp_tokenizer):
        data = json.loads(tokenizer.to_json())
        if edit == "ignore_merges and NFC":
            data["model"]["ignore_merges"], data["normalizer"] = True, {"type": "NFC"}
        elif edit == "an added token in a hole":  # tokenizers renumbers it: so must hf
            data["added_tokens"].append(
                {
                    "id": tokenizer.id_space + 5,
                    "content": "<x>",
                    "special": True,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                }
            )
        edited = BPETokenizer.from_json(json.dumps(data))
        assert edited.hf.to_str() == Tokenizer.from_str(edited.to_json()).to_str()


def _every_code_point_tokenizer(pipeline: dict, id_scale: float | None = None) -> BPETokenizer:
    """Tokens of every code point but the surrogates (64 a token, and the awkward ones alone),
    merges among the lone ones, and the given pipeline; with ``id_scale``, float ids (i · id_scale)."""
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    alone = ['"', "\\", "\x00", "\x1f", "\x7f", "\u2028", "Ġ", "\U0001f600"]
    merges = [(a, b) for a, b in zip(alone, alone[1:])]
    tokens = ["".join(points[k : k + 64]) for k in range(0, len(points), 64)] + alone + [a + b for a, b in merges]
    vocab = {t: i if id_scale is None else i * id_scale for i, t in enumerate(dict.fromkeys(tokens))}
    return BPETokenizer(vocab=vocab, merges=merges, pipeline=pipeline)


@pytest.mark.parametrize("case", ["added tokens", "no added tokens, floats", "ids that are floats"])
def test_the_export_is_json_of_to_dict(case):
    """The vocabulary and merges are written by pydantic-core, the rest by json: the file is
    byte for byte ``json.dumps`` of ``to_dict`` (strings of every code point; floats, which the
    two write differently, in the pipeline; a vocabulary of float ids is json's alone)."""
    added = [
        {
            "id": 0,
            "content": "\x00\x01",
            "special": True,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
        }
    ]
    floats = {"padding": {"pad_to_multiple_of": 1e-07, "pad_id": 2.5}, "decoder": {"type": "Fuse"}}
    pipeline = {"added_tokens": added} if case == "added tokens" else floats
    tokenizer = _every_code_point_tokenizer(pipeline, 1e-07 if case == "ids that are floats" else None)
    expected = json.dumps(tokenizer.to_dict(), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    assert tokenizer.to_json_bytes() == expected


def test_round_trip_is_byte_identical(byte_tokenizer):
    assert BPETokenizer.from_json(byte_tokenizer.to_json()).to_json() == byte_tokenizer.to_json()


def test_import_keeps_ignore_merges_and_pipeline(byte_tokenizer):
    data = json.loads(byte_tokenizer.to_json())
    data["model"]["ignore_merges"] = True
    data["normalizer"] = {"type": "NFC"}
    imported = BPETokenizer.from_json(json.dumps(data))
    assert imported.ignore_merges
    exported = json.loads(imported.to_json())
    assert exported["model"]["ignore_merges"] is True
    assert exported["normalizer"] == {"type": "NFC"}


def test_string_merges_of_older_files_are_read():
    data = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}
    tok = BPETokenizer.from_json(json.dumps(data))
    assert tok.merges == (("a", "b"),)
    assert tok.encode("ab") == [2]


def test_rejects_duplicate_ids():
    with pytest.raises(ValueError, match="two tokens"):
        BPETokenizer(vocab={"a": 0, "b": 0}, merges=[], pipeline={})


def test_base_and_special_tokens():
    tok = BPETokenizer.train(["aaab"] * 5, vocab_size=260, special_tokens=["<eos>"])
    assert "<eos>" in tok.special_tokens and "<eos>" in tok.base_tokens
    assert len([t for t in tok.base_tokens if len(t) == 1]) == 256
    assert all(a + b not in tok.base_tokens for a, b in tok.merges)


def test_character_level_tokenizer_is_lossless():
    tok = BPETokenizer.train(["12+3=15", "7-2=5"] * 10, vocab_size=20, byte_level=False)
    assert not tok.byte_level
    for text in ["12+3=15", "1-1=5", "777"]:
        assert tok.decode(tok.encode(text)) == text
    assert tok.pre_tokenize("12+3=15") == ["12+3=15"]


def test_pre_tokenize_byte_level_words(byte_tokenizer):
    assert byte_tokenizer.pre_tokenize("hi there") == ["hi", "Ġthere"]
    assert byte_tokenizer.token_bytes("Ġthere") == b" there"


def test_bytes_per_token_and_jaccard(byte_tokenizer):
    text = "stream token"
    assert byte_tokenizer.bytes_per_token([text]) == len(text) / len(byte_tokenizer.encode(text))
    # Bytes, not characters: "é" is two UTF-8 bytes, "€" three, one character each.
    chars = BPETokenizer.train(["éé€"] * 3, vocab_size=4, byte_level=False)
    assert chars.encode("é€") == [chars.vocab["é"], chars.vocab["€"]]
    assert chars.bytes_per_token(["é€", "é"]) == pytest.approx((2 + 3 + 2) / 3)
    other = BPETokenizer.train(["zzz yyy"] * 5, vocab_size=260)
    shared = len(set(byte_tokenizer.vocab) & set(other.vocab))
    union = len(set(byte_tokenizer.vocab) | set(other.vocab))
    assert jaccard_distance(byte_tokenizer, other) == pytest.approx(1 - shared / union)
    assert 0 < jaccard_distance(byte_tokenizer, other) < 1


def test_fast_word_counts_equal_the_pre_tokenizer(byte_tokenizer, corpus):
    from collections import Counter

    texts = corpus[:50] + probe_texts(byte_tokenizer, n=200) + ["it's  we'll \n\n  x", "   ", "a\u00a0b 12345"]
    expected = Counter(w for t in texts for w in byte_tokenizer.pre_tokenize(t))
    assert byte_tokenizer.plain_gpt2_pre_tokenizer
    assert byte_tokenizer.word_counts(texts) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=40))
def test_fast_word_counts_agree_on_any_ascii(text):
    from collections import Counter

    tokenizer = _gpt2_style()
    assert tokenizer.word_counts([text]) == Counter(tokenizer.pre_tokenize(text))


@functools.cache
def _gpt2_style() -> BPETokenizer:
    return BPETokenizer.train(["x"], vocab_size=257)
