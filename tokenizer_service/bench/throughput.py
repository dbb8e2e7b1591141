"""Throughput: tokmaint's statistics update against raw ``tokenizers`` encoding, same text.

``encode_mb_s``: ``Tokenizer.encode_batch`` over the documents (Rust, all cores).
``stats_mb_s``: one pass of Ted-Tok's step update (pre-tokenize, count each distinct word once,
encode new words with the version's cache, vectorised token/pair counts, EMA update of the
in-memory store) in steps of ``step_docs`` documents, starting from an empty cache.
``revision_seconds``: one revision with K=100 at V=50,257 over a pair table padded to ~1M pairs
by one extra step of rare random pairs (``revision_changes`` says how many ids it changed).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from tokenizer_service.bench.corpus_tokenizer import CorpusTokenizerSettings
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import batches, oldest, read_corpus
from tokenizer_service.counting import KeyCounts, pack_pair
from tokenizer_service.settings import SettingsConfigDict, setting, whole
from tokenizer_service.tedtok import TedTok, TedTokConfig


class ThroughputSettings(CorpusTokenizerSettings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_THROUGHPUT_")

    step_docs: int = setting(1024, whole(1), "documents per stats-update step")
    tracked_pairs: int = setting(1_000_000, whole(0), "pairs in the table the timed revision ranks")
    batch_size: int = setting(100, whole(1), "adds+deletes of the timed revision (K)")


def run_throughput(
    corpus: str | Path, settings: ThroughputSettings | None = None, *, progress: bool = True
) -> dict[str, Any]:
    settings = settings or ThroughputSettings()
    docs = oldest(read_corpus(corpus), settings.max_mb)
    texts = [d.text for d in docs]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    tokenizer = BPETokenizer.train(texts, vocab_size=settings.vocab_size)

    started = time.perf_counter()
    tokenizer.hf.encode_batch(texts, add_special_tokens=False)
    encode_s = time.perf_counter() - started

    # The tokenizer was trained on this very text, so no pair beats a sink by the paper's margin;
    # a near-zero margin makes the timed revision do its full K adds and deletes.
    tedtok = TedTok(tokenizer, config=TedTokConfig(batch_size=settings.batch_size, beta=1e-9))
    steps = list(batches(docs, settings.step_docs))
    started = time.perf_counter()
    for step in tqdm(steps, desc="stats update", unit="step", disable=not progress):
        tedtok.observe_texts(step)
    stats_s = time.perf_counter() - started

    # Pad the pair table to the target size with one more step of rare random pairs.
    store = tedtok.store
    missing = settings.tracked_pairs - store.tracked_pairs
    if missing > 0:
        rng = np.random.default_rng(0)
        ids = np.array(sorted(tokenizer.vocab.values()), np.int64)
        keys = np.unique(pack_pair(rng.choice(ids, 2 * missing), rng.choice(ids, 2 * missing)))
        keys = keys[np.argsort(store.pair(keys) > 0, kind="stable")][:missing]
        store.apply_counts(KeyCounts(np.zeros(0, np.int64), np.zeros(0), np.sort(keys), np.full(len(keys), 1e-6)))
    tracked = store.tracked_pairs
    started = time.perf_counter()
    revision = tedtok.revise()
    revision_s = time.perf_counter() - started
    return {
        "encode_mb_s": mb / encode_s,
        "stats_mb_s": mb / stats_s,
        "ratio": encode_s / stats_s,
        "revision_seconds": revision_s,
        "revision_changes": len(revision.diff.entries) if revision else 0,
        "tracked_pairs": tracked,
        "vocab_size": len(tokenizer),
        "megabytes": mb,
        "documents": len(docs),
    }
