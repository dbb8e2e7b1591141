"""Every family of BPE tokenizer through every path that takes a user's tokenizer, on
tokenizers built here from their families' configs (the real files: test_real_tokenizers.py):
byte-level with a normalizer (Qwen's NFC, Claude's NFKC) and SentencePiece-style with byte
fallback (Llama-2's pipeline)."""

import json

import numpy as np
import pytest
from transformers import PreTrainedTokenizerFast

from tests.conftest import NEW_WORDS, sentences
from tokenizer_service.bpe import BYTE_FALLBACK_TOKENS, BPETokenizer
from tokenizer_service.counting import StepCounter, unpack_pair
from tokenizer_service.residue_audit import ResidueOptions, audit_residues
from tokenizer_service.tedtok import TedTok, TedTokConfig
from tokenizer_service.validation import validate

TEXTS = sentences(300, seed=5) + ["  indented  code\n\tand tabs", "ünïcödé — 中文 🙂 \x00", "a\u2581b literal"]


@pytest.fixture(scope="module", params=["sentencepiece", "nfc", "nfkc"])
def family(request, byte_tokenizer, sp_tokenizer) -> BPETokenizer:
    if request.param == "sentencepiece":
        return sp_tokenizer
    data = json.loads(byte_tokenizer.to_json())
    data["normalizer"] = {"type": request.param.upper()}
    return BPETokenizer.from_json(json.dumps(data))


def test_the_family_is_valid_on_every_probe(family):
    report = validate(family)
    assert report.ok and report.probes == 200, report.reasons


def test_a_missing_byte_fallback_token_is_refused(sp_tokenizer):
    vocab = {t: i for t, i in sp_tokenizer.vocab.items() if t != "<0xC3>"}
    report = validate(sp_tokenizer.replace_model(vocab=vocab, merges=sp_tokenizer.merges))
    assert any("byte fallback incomplete: 1 of the 256" in r and "<0xC3>" in r for r in report.reasons)
    assert any("lossy" in r for r in report.reasons)  # é, ü ... need byte 0xC3


def test_sentencepiece_token_bytes(sp_tokenizer):
    assert sp_tokenizer.token_bytes("\u2581stream") == b" stream"
    assert [sp_tokenizer.token_bytes(t) for t in BYTE_FALLBACK_TOKENS] == [bytes([b]) for b in range(256)]


def test_counting_sees_what_encoding_emits(family):
    """Words split by ``pre_tokenize`` (at ▁ for SentencePiece) encode like the whole text."""
    counts = StepCounter(family).count_texts(TEXTS, neighbours=True)
    emitted = np.bincount(np.concatenate([np.asarray(ids) for ids in family.encode_batch(TEXTS)]))
    assert dict(zip(counts.token_ids.tolist(), counts.token_counts.tolist())) == {
        i: float(n) for i, n in enumerate(emitted) if n
    }
    if family.space_symbol:  # no counted pair crosses a word start: a merge never spans two words
        for key in counts.pair_keys.tolist():
            u, v = (family.id_to_token[i] for i in unpack_pair(key))
            assert u.strip("\u2581") == "" or not v.startswith("\u2581"), (u, v)


def test_residues_are_lossless_and_the_export_loads_in_transformers(family, tmp_path):
    audit = audit_residues(family, TEXTS, ResidueOptions(r=0.3, s=4.0))
    assert audit.summary["lossless"] and audit.summary["residues"] > 0
    assert audit.summary["export_agreement"] >= 0.99
    exported = audit.removal.tokenizer
    assert validate(exported, parent=family).ok
    exported.save(tmp_path / "tokenizer.json")
    fast = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    assert [fast(t, add_special_tokens=False)["input_ids"] for t in TEXTS] == exported.encode_batch(TEXTS)


def test_evolve_keeps_every_id_the_stream_does_not_touch(family):
    tedtok = TedTok(family, config=TedTokConfig(alpha=0.3, batch_size=8, interval=3, warmup_steps=3))
    parent = family
    for step in range(24):
        revision = tedtok.observe_texts(sentences(30, seed=100 + step, words=NEW_WORDS))
        if revision is not None:
            assert validate(revision.tokenizer, parent=parent).ok
            parent = revision.tokenizer
    assert len(tedtok.revisions) >= 2
    touched = {e.id for r in tedtok.revisions for e in r.diff.entries}
    last = tedtok.tokenizer
    assert all(last.id_to_token.get(i) == t for i, t in family.id_to_token.items() if i not in touched)
    assert last.pipeline == family.pipeline and last.model_options == family.model_options
    added = [t for r in tedtok.revisions for t in r.added]
    assert added and not any(
        t in BYTE_FALLBACK_TOKENS for r in tedtok.revisions for m in r.tokenizer.merges[-8:] for t in m
    )
    if family.space_symbol:  # SentencePiece-style: new tokens stay inside a word
        assert all("\u2581" not in t.lstrip("\u2581") for t in added)
    assert {family.token_bytes(t).decode().strip() for t in added} & set(NEW_WORDS)
