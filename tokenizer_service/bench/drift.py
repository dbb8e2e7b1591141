"""Generic drift benchmark on any timestamped corpus (Ted-Tok Table 2, MT/QA columns' analogue).

Old is trained on the oldest slice, New from scratch on the newest slice (same vocabulary size),
and Ted-Tok evolves Old over the documents in between and the newest slice, one time step per
``step_docs`` documents. All three are scored on the newest ``held_out`` documents, which no
tokenizer sees.

Defaults: Old sees the oldest 60% (a model pre-trained on most of the history, then maintained),
New the newest 20%, and Ted-Tok charges ``base_token_cost`` for deleting a pre-trained token so
it recycles its own ids first. Why: on the git corpus with Old on the oldest 20% (2005-2008) the
vocabulary has to move so far that even an oracle — Ted-Tok revising on the newest slice's own
counts — closes 0.95 of the gap only after changing more than 11% of the ids.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from tokenizer_service.bpe import BPETokenizer, jaccard_distance
from tokenizer_service.corpus import batches, read_corpus
from tokenizer_service.tedtok import TedTok, TedTokConfig


@dataclass(frozen=True)
class DriftSettings:
    vocab_size: int = 4096
    old_share: float = 0.6
    new_share: float = 0.2
    held_out: int = 2000
    step_docs: int = 64
    alpha: float = 0.01
    beta: float = 1.2
    batch_size: int = 20
    interval: int = 10
    warmup: float = 0.03
    freeze_last: float = 0.0
    base_token_cost: float = 2.5e-5


def ids_stable(old: BPETokenizer, new: BPETokenizer) -> float:
    """Share of the old version's ids that still hold the same token.

    >>> t = BPETokenizer.train(["abc"], vocab_size=260)
    >>> ids_stable(t, t)
    1.0
    """
    return sum(new.id_to_token.get(i) == t for i, t in old.id_to_token.items()) / len(old.id_to_token)


def run_drift(corpus: str | Path, settings: DriftSettings = DriftSettings(), *, progress: bool = True) -> dict:
    docs = read_corpus(corpus)
    n = len(docs)
    held = docs[n - settings.held_out :]
    rest = docs[: n - settings.held_out]
    n_old, n_new = round(settings.old_share * n), round(settings.new_share * n)
    if n_old < 1 or n_new <= 0 or n_old + settings.held_out >= n:
        raise ValueError(f"corpus of {n} documents is too small for these slices")
    old_texts = [d.text for d in rest[:n_old]]
    new_texts = [d.text for d in rest[-(n_new - settings.held_out):]] if n_new > settings.held_out else []
    if not new_texts:
        raise ValueError("new_share must cover more documents than held_out")
    stream = rest[n_old:]
    eval_texts = [d.text for d in held]

    old = BPETokenizer.train(old_texts, vocab_size=settings.vocab_size)
    started = time.perf_counter()
    new = BPETokenizer.train(new_texts, vocab_size=settings.vocab_size)
    new_seconds = time.perf_counter() - started

    total = -(-len(stream) // settings.step_docs)
    config = TedTokConfig.for_schedule(
        total, warmup=settings.warmup, freeze_last=settings.freeze_last, alpha=settings.alpha, beta=settings.beta,
        batch_size=settings.batch_size, interval=settings.interval, base_token_cost=settings.base_token_cost,
    )
    tedtok = TedTok(old, config=config, lineage="drift")
    for texts in tqdm(batches(stream, settings.step_docs), total=total, desc="ted-tok drift", unit="step",
                      disable=not progress):
        tedtok.observe_texts(texts)
    evolved = tedtok.tokenizer
    bpt = {name: tok.bytes_per_token(eval_texts) for name, tok in (("old", old), ("new", new), ("tedtok", evolved))}
    return {
        "bytes_per_token": bpt,
        "gap_closed": (bpt["tedtok"] - bpt["old"]) / (bpt["new"] - bpt["old"]),
        "jaccard": {"old_vs_new": jaccard_distance(old, new), "tedtok_vs_new": jaccard_distance(evolved, new)},
        "ids_stable": ids_stable(old, evolved),
        "seconds": {"revisions": tedtok.revision_seconds, "new_training": new_seconds},
        "revisions": len(tedtok.revisions),
        "steps": total,
        "documents": {"old": len(old_texts), "stream": len(stream), "new": len(new_texts), "held_out": len(held)},
    }
