"""tokenizer_json's checks, as the loader reports them: every malformed tokenizer.json is an
InvalidTokenizer naming file, JSON path and reason (all of them), fast, and never another
exception. (Good files loading unchanged: test_validation.py.)"""

import json
import time

import pytest

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import InvalidTokenizer
from tokenizer_service.tokenizer_json import MAX_ID_SPACE
from tokenizer_service.validation import load_tokenizer
from tests.support.tokenizer_files import compact, edited, save


def _duplicate_token(good) -> bytes:
    """The same token twice in model.vocab (JSON allows it; the last would silently win)."""
    return compact(good).replace('"vocab":{', '"vocab":{"low":5,', 1).encode()


CASES = [
    ("JSON list", lambda g: [g], "the top level must be a JSON object, got a list"),
    ("not JSON", lambda g: b'{"model": ', "not JSON (Expecting value at line 1 column 11)"),
    ("not UTF-8", lambda g: b'{"model": "\xff"}', "not UTF-8 (byte 0xff at offset 11)"),
    ("no model", lambda g: {"version": "1.0"}, "model: must be an object, got nothing"),
    (
        "WordPiece",
        lambda g: edited(g, lambda d: d["model"].update(type="WordPiece")),
        "model.type: 'WordPiece'; tokmaint maintains BPE tokenizers only",
    ),
    (
        "vocab a list",
        lambda g: edited(g, lambda d: d["model"].update(vocab=["a"])),
        "model.vocab: must be an object of token -> id, got a list",
    ),
    (
        "negative id",
        lambda g: edited(g, lambda d: d["model"]["vocab"].update(low=-1)),
        "model.vocab: 1 negative ids, e.g. 'low': -1",
    ),
    (
        "huge id",
        lambda g: edited(g, lambda d: d["model"]["vocab"].update(low=10**9)),
        f"model.vocab: 1 ids of {MAX_ID_SPACE:,} or more, e.g. 'low': 1000000000",
    ),
    (
        "string id",
        lambda g: edited(g, lambda d: d["model"]["vocab"].update(low="7")),
        "model.vocab: 1 ids that are not whole numbers, e.g. 'low': a string",
    ),
    (
        "boolean id",
        lambda g: edited(g, lambda d: d["model"]["vocab"].update(low=True)),
        "ids that are not whole numbers, e.g. 'low': a boolean",
    ),
    (
        "shared id",
        lambda g: edited(g, lambda d: d["model"]["vocab"].update(low=d["model"]["vocab"]["w"])),
        "model.vocab: 1 ids given to two tokens",
    ),
    ("duplicate token", _duplicate_token, "model.vocab: key 'low' appears more than once"),
    (
        "lone surrogate",
        lambda g: compact(g).replace('"vocab":{', '"vocab":{"\\ud800":999,', 1).encode(),
        "model.vocab: 1 tokens that are not valid Unicode",
    ),
    (
        "merge outside",
        lambda g: edited(g, lambda d: d["model"]["merges"].append(["q", "zz"])),
        "model.merges: 1 merges name tokens outside the vocabulary, e.g. [",
    ),
    (
        "merge product outside",
        lambda g: edited(g, lambda d: d["model"]["merges"].append(["w", "w"])),
        "model.merges: 1 merges produce tokens outside the vocabulary",
    ),
    (
        "merge malformed",
        lambda g: edited(g, lambda d: d["model"]["merges"].append(["a"])),
        'merges that are not "a b" or ["a", "b"]',
    ),
    ("merges missing", lambda g: edited(g, lambda d: d["model"].pop("merges")), "model.merges: must be a list"),
    (
        "added token without id",
        lambda g: edited(g, lambda d: d["added_tokens"].append({"content": "<x>"})),
        "added_tokens: 1 entries without a non-empty 'content' and an 'id'",
    ),
    (
        "a key nested 500 deep",
        lambda g: edited(g, lambda d: d.update(extra=json.loads("[" * 500 + "]" * 500))),
        "extra" + "[0]" * 64 + ": nested more than 64 levels deep",
    ),
    (
        "pre-tokenizer tokenizers rejects",
        lambda g: edited(g, lambda d: d.update(pre_tokenizer={"type": "Nope"})),
        "tokenizer.json does not load in tokenizers: data did not match any variant",
    ),
]


@pytest.mark.parametrize("case, make, reason", CASES, ids=[c[0] for c in CASES])
def test_malformed_tokenizers_are_refused_with_the_reason(tmp_path, good, case, make, reason):
    path = save(tmp_path, make(good))
    started = time.perf_counter()
    for allow_invalid in (False, True):
        with pytest.raises(InvalidTokenizer) as caught:
            load_tokenizer(path, allow_invalid=allow_invalid)
        assert any(reason in r for r in caught.value.reasons), caught.value.reasons
        assert str(caught.value).startswith(f"{path}: invalid tokenizer: ")
    assert time.perf_counter() - started < 10  # refused before anything is allocated or encoded


def test_every_reason_is_reported(tmp_path, good):
    def two_problems(d):
        d["model"]["vocab"]["low"] = -3
        d["model"]["merges"].append(["q", "zz"])

    with pytest.raises(InvalidTokenizer) as caught:
        load_tokenizer(save(tmp_path, edited(good, two_problems)))
    assert len(caught.value.reasons) == 2


UNUSABLE = [
    (
        "dropout",
        lambda d: d["model"].update(dropout=0.5),
        "model.dropout: 0.5 is not supported (encoding would be random)",
    ),
    (
        "subword prefix",
        lambda d: d["model"].update(continuing_subword_prefix="##"),
        'model.continuing_subword_prefix: "##" is not supported',
    ),
    (
        "added token on another's id",
        lambda d: d["added_tokens"].append({"id": d["model"]["vocab"]["w"], "content": "<x>", "special": True}),
        "added_tokens: 1 added tokens clash with the vocabulary, e.g. [0] '<x>' has id",
    ),
    (
        "token outside the byte alphabet",
        lambda d: d["model"]["vocab"].update({" ": 9999}),
        "1 tokens hold characters outside the byte-level alphabet, e.g. [' ']",
    ),
    ("huge integer", None, "not JSON tokmaint can read"),
]


@pytest.mark.parametrize("case, edit, reason", UNUSABLE, ids=[c[0] for c in UNUSABLE])
def test_unusable_tokenizers_are_refused_even_when_invalid_ones_are_allowed(tmp_path, good, case, edit, reason):
    huge = '"vocab":{"x":' + "9" * 5000 + ","
    data = compact(edited(good, edit)) if edit else compact(good).replace('"vocab":{', huge)
    path = save(tmp_path, data.encode())
    with pytest.raises(InvalidTokenizer) as caught:
        load_tokenizer(path, allow_invalid=True)
    assert any(reason in r for r in caught.value.reasons), caught.value.reasons


def test_rejects_non_bpe_models():
    with pytest.raises(InvalidTokenizer, match="model.type: 'WordPiece'; tokmaint maintains BPE tokenizers only"):
        BPETokenizer.from_json(json.dumps({"model": {"type": "WordPiece", "vocab": {}, "merges": []}}))
