import json

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.validation import InvalidTokenizer, probe_texts, validate

import pytest
from tokenizer_service.validation import load_tokenizer
from tests.support.tokenizer_files import edited, save


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


@pytest.mark.parametrize(
    "normalizer, text, promised",
    [
        ({"type": "NFC"}, "e\u0301te\u0301", "\u00e9t\u00e9"),  # decomposed é comes back composed
        ({"type": "NFKC"}, "\ufb01 \u2460", "fi 1"),
        ({"type": "Lowercase"}, "MiXed Ünï", "mixed ünï"),
        (
            {
                "type": "Sequence",
                "normalizers": [
                    {"type": "Strip", "strip_left": True, "strip_right": True},
                    {"type": "Replace", "pattern": {"String": "\t"}, "content": " "},
                ],
            },
            "  a\tb ",
            "a b",
        ),
    ],
)
def test_a_normalizer_is_a_promise_not_a_loss(byte_tokenizer, normalizer, text, promised):
    """decode(encode(s)) is normalize(s): the tokenizer is valid, and ``text`` round-trips to its
    normalized form, not to itself."""
    data = json.loads(byte_tokenizer.to_json())
    data["normalizer"] = normalizer
    tokenizer = BPETokenizer.from_json(json.dumps(data))
    assert tokenizer.decode(tokenizer.encode(text)) == promised != text
    report = validate(tokenizer)
    assert report.ok, report.reasons


def test_a_decoder_that_drops_a_byte_is_refused(byte_tokenizer):
    data = json.loads(byte_tokenizer.to_json())
    data["decoder"] = {
        "type": "Sequence",
        "decoders": [data["decoder"], {"type": "Replace", "pattern": {"String": "\x07"}, "content": ""}],
    }
    report = validate(BPETokenizer.from_json(json.dumps(data)))
    assert any("lossy" in r and "\\x07" in r for r in report.reasons), report.reasons


def test_a_byte_level_tokenizer_without_its_decoder_is_refused(byte_tokenizer):
    data = json.loads(byte_tokenizer.to_json())
    data["decoder"] = {"type": "Fuse"}
    report = validate(BPETokenizer.from_json(json.dumps(data)))
    assert any("lossy on 200 of 200" in r for r in report.reasons), report.reasons


def test_a_normalizer_replacement_the_decoder_does_not_undo_is_a_loss(byte_tokenizer):
    """Only a decoder step that undoes the encoding side's replacement is cleanup: a decoder
    turning every "x" into "y" loses text the normalizer never touched."""
    data = json.loads(byte_tokenizer.to_json())
    data["normalizer"] = {"type": "Replace", "pattern": {"String": "y"}, "content": "x"}
    data["decoder"] = {
        "type": "Sequence",
        "decoders": [data["decoder"], {"type": "Replace", "pattern": {"String": "x"}, "content": "y"}],
    }
    assert validate(BPETokenizer.from_json(json.dumps(data))).ok  # "y" -> "x" -> "y": literal x comes back as y
    data["normalizer"] = None
    assert any("lossy" in r for r in validate(BPETokenizer.from_json(json.dumps(data))).reasons)


def test_unloadable_tokenizer_is_refused(byte_tokenizer):
    data = json.loads(byte_tokenizer.to_json())
    data["pre_tokenizer"] = {"type": "NoSuchPreTokenizer"}
    report = validate(BPETokenizer.from_json(json.dumps(data)))
    assert any("does not load" in r for r in report.reasons)


def test_reachability_regression_against_parent():
    parent = BPETokenizer(
        vocab={"a": 0, "b": 1, "c": 2, "bc": 3, "abc": 4},
        merges=[("b", "c"), ("a", "bc")],
        pipeline={"decoder": {"type": "Fuse"}},
    )
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
    data["added_tokens"].append(
        {
            "id": data["model"]["vocab"]["ü"],
            "content": "ü",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    tokenizer = BPETokenizer.from_json(json.dumps(data))
    assert tokenizer.decode(tokenizer.encode("ü")) != "ü"
    assert "1 added tokens mean other bytes as byte-level tokens, e.g. ['ü']" in validate(tokenizer).reasons
    assert validate(byte_tokenizer).ok


def test_added_tokens_tokenizers_would_renumber_are_refused_and_revisions_keep_their_ids(byte_tokenizer):
    """``tokenizers`` keeps an added token's id only when the vocabulary holds it; under a hole it
    numbers it on from the vocabulary's size, onto a model token's id."""
    data = json.loads(byte_tokenizer.to_json())
    eos = byte_tokenizer.id_space
    data["added_tokens"] = [
        {
            "id": eos,
            "content": "<eos>",
            "special": True,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
        }
    ]
    with_eos = BPETokenizer.from_json(json.dumps(data))
    assert validate(with_eos).ok
    sink = with_eos.merge_outputs[-1]
    data["model"]["vocab"] = {t: i for t, i in data["model"]["vocab"].items() if t != sink}
    data["model"]["merges"] = [m for m in data["model"]["merges"] if "".join(m) != sink]
    holed = BPETokenizer.from_json(json.dumps(data))
    assert holed.hf.token_to_id("<eos>") == eos - 1  # the id of the model's last token
    assert any(f"'<eos>' {eos} -> {eos - 1}" in r for r in validate(holed).reasons)

    revised = with_eos.replace_model(vocab=holed.vocab, merges=holed.merges)  # a revision leaving the same hole
    assert revised.vocab["<eos>"] == revised.hf.token_to_id("<eos>") == eos
    assert validate(revised, parent=with_eos).ok and revised.decode(revised.encode("data<eos>")) == "data<eos>"


def test_a_lossy_tokenizer_fails_validation_but_loads_unchecked(tmp_path, good):
    def drop_a_byte(d):
        del d["model"]["vocab"]["Ā"]  # byte 0x00: it no longer encodes

    path = save(tmp_path, edited(good, drop_a_byte))
    with pytest.raises(InvalidTokenizer, match="byte alphabet incomplete"):
        load_tokenizer(path)
    reported = []
    assert "Ā" not in load_tokenizer(path, allow_invalid=True, on_invalid=reported.extend).vocab
    assert reported[0] == "byte alphabet incomplete: 1 of 256 bytes missing, e.g. [0]"
    assert reported[1].startswith("encode→decode is lossy on 9 of 200 probes")


def test_paths_that_hold_no_tokenizer(tmp_path):
    with pytest.raises(InvalidTokenizer, match="file not found"):
        load_tokenizer(tmp_path / "missing.json")
    with pytest.raises(InvalidTokenizer, match="is a directory without a tokenizer.json"):
        load_tokenizer(tmp_path)


def test_good_files_load_unchanged(tmp_path, good):
    path = save(tmp_path, good)
    assert load_tokenizer(path).to_json() == json.dumps(good, ensure_ascii=False, separators=(",", ":"))
    assert load_tokenizer(tmp_path).vocab == good["model"]["vocab"]  # a folder holding tokenizer.json
    old_style = edited(good, lambda d: d["model"].update(merges=[" ".join(m) for m in d["model"]["merges"]]))
    assert load_tokenizer(save(tmp_path, old_style, "old.json")).merges == tuple(map(tuple, good["model"]["merges"]))
