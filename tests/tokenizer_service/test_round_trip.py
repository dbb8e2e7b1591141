"""What decode(encode(s)) promises, per pipeline: the normalizer's text plus the decoder's
documented cleanup, checked against what ``tokenizers`` really decodes."""

import json
import unicodedata

import pytest

from tests.conftest import LLAMA2_PIPELINE
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.round_trip import RoundTrip
from tokenizer_service.validation import probe_texts, validate

TEXTS = [
    "plain text",
    "  two  leading spaces",
    "trailing  ",
    "a\u2581literal\u2581symbol",
    "\u00e9 vs e\u0301",
    "\ufb01ne \u2460",
    "tabs\tand\nnewlines",
    "CamelCase ÜBER",
]


def with_pipeline(tokenizer: BPETokenizer, **sections) -> BPETokenizer:
    data = json.loads(tokenizer.to_json())
    data.update(sections)
    return BPETokenizer.from_json(json.dumps(data))


def round_trips(tokenizer: BPETokenizer, texts: list[str]) -> list[str]:
    return [tokenizer.decode(tokenizer.encode(t)) for t in texts]


def test_nfc_tokenizer_returns_the_nfc_form_and_is_valid(byte_tokenizer):
    nfc = with_pipeline(byte_tokenizer, normalizer={"type": "NFC"})
    decomposed = "cafe\u0301 na\u0131\u0308ve"
    assert unicodedata.normalize("NFC", decomposed) != decomposed
    assert round_trips(nfc, [decomposed]) == [unicodedata.normalize("NFC", decomposed)]
    assert RoundTrip.of(nfc.hf).promised([decomposed]) == [unicodedata.normalize("NFC", decomposed)]
    report = validate(nfc)
    assert report.ok and report.probes == 200, report.reasons


@pytest.mark.parametrize("normalizer", ["NFC", "NFD", "NFKC", "NFKD", "Lowercase"])
def test_promise_is_what_a_normalizing_byte_level_tokenizer_decodes(byte_tokenizer, normalizer):
    tokenizer = with_pipeline(byte_tokenizer, normalizer={"type": normalizer})
    texts = TEXTS + probe_texts(tokenizer, n=100)
    assert RoundTrip.of(tokenizer.hf).promised(texts) == round_trips(tokenizer, texts)


def test_llama2_pipeline_promise(sp_tokenizer):
    """Prepend + Replace normalizer, Replace/ByteFallback/Fuse/Strip decoder: a literal ▁ comes
    back as a space, leading spaces survive (one ▁ is prepended and stripped again)."""
    promise = RoundTrip.of(sp_tokenizer.hf)
    assert promise.promised(TEXTS) == round_trips(sp_tokenizer, TEXTS)
    assert promise.promised(["a\u2581b", "  x"]) == ["a b", "  x"]


@pytest.mark.parametrize(
    "decoder",
    [
        LLAMA2_PIPELINE["decoder"],  # Mistral's tokenizer.json
        {
            "type": "Sequence",
            "decoders": [
                {"type": "ByteFallback"},
                {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"},
                {"type": "Fuse"},
            ],
        },
    ],
)
def test_metaspace_pre_tokenizer_promise(sp_tokenizer, decoder):
    """Spaces and the prepended ▁ come from a Metaspace pre-tokenizer and the decoder drops the
    first ▁: a leading space is lost, as SentencePiece loses it."""
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False}
    tokenizer = with_pipeline(sp_tokenizer, normalizer=None, pre_tokenizer=metaspace, decoder=decoder)
    assert RoundTrip.of(tokenizer.hf).promised(TEXTS) == round_trips(tokenizer, TEXTS)
    assert round_trips(tokenizer, [" x"]) == ["x"]
    assert validate(tokenizer).ok


def test_a_strip_with_nothing_prepended_is_no_cleanup(sp_tokenizer):
    """The Llama-2 decoder without its Prepend normalizer strips a real leading space: a loss."""
    tokenizer = with_pipeline(sp_tokenizer, normalizer=LLAMA2_PIPELINE["normalizer"]["normalizers"][1])
    assert round_trips(tokenizer, [" x"]) == ["x"]
    assert RoundTrip.of(tokenizer.hf).promised([" x"]) == [" x"]
    assert any("lossy" in r for r in validate(tokenizer).reasons)
