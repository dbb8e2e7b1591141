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
from tokenizer_service.errors import CorpusError
from tokenizer_service.evolve import StreamSettings
from tokenizer_service.options import setting, share, whole
from tokenizer_service.tedtok import TedTok


@dataclass(frozen=True)
class DriftSettings(StreamSettings):
    old_share: float = setting(0.6, share(one=False), "share of the oldest documents Old is trained on")
    new_share: float = setting(0.2, share(one=False), "share of the newest documents New is trained on "
                                                      "(the newest --held-out of them are held out)")
    held_out: int = setting(2000, whole(1), "newest documents no tokenizer sees, scored for all three")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.old_share + self.new_share > 1:
            raise ValueError(f"old_share + new_share must be at most 1, got {self.old_share} + {self.new_share}")


def ids_stable(old: BPETokenizer, new: BPETokenizer) -> float:
    """Share of the old version's ids that still hold the same token.

    >>> old = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2, "abb": 3}, merges=[("a", "b"), ("ab", "b")], pipeline={})
    >>> new = BPETokenizer(vocab={"a": 0, "b": 1, "ba": 2, "ab": 3}, merges=[("a", "b"), ("b", "a")], pipeline={})
    >>> ids_stable(old, new)  # ids 0 and 1 kept; "ab" moved from 2 to 3; "abb" is gone
    0.5
    """
    return sum(new.id_to_token.get(i) == t for i, t in old.id_to_token.items()) / len(old.id_to_token)


def run_drift(corpus: str | Path, settings: DriftSettings = DriftSettings(), *, progress: bool = True) -> dict:
    docs = read_corpus(corpus, progress=progress)
    n = len(docs)
    n_old, n_new = round(settings.old_share * n), round(settings.new_share * n)
    if n_old < 1:
        raise CorpusError(docs.path, f"{n} documents: --old-share {settings.old_share} gives Old no documents; "
                                     "raise --old-share")
    if n_new <= settings.held_out:
        raise CorpusError(docs.path, f"{n} documents: --new-share {settings.new_share} is {n_new} documents, not "
                                     f"more than --held-out {settings.held_out}; lower --held-out below {n_new} "
                                     "or raise --new-share")
    if n_old + settings.held_out >= n:
        raise CorpusError(docs.path, f"{n} documents: Old ({n_old}) and --held-out {settings.held_out} leave no "
                                     "stream; lower --held-out or --old-share")
    held = docs[n - settings.held_out :]
    rest = docs[: n - settings.held_out]
    old_texts = [d.text for d in rest[:n_old]]
    new_texts = [d.text for d in rest[-(n_new - settings.held_out):]]
    stream = rest[n_old:]
    eval_texts = [d.text for d in held]

    old = BPETokenizer.train(old_texts, vocab_size=settings.vocab_size, progress=progress)
    started = time.perf_counter()
    new = BPETokenizer.train(new_texts, vocab_size=settings.vocab_size)
    new_seconds = time.perf_counter() - started

    total = -(-len(stream) // settings.step_docs)
    tedtok = TedTok(old, config=settings.tedtok_config(total), lineage="drift")
    for texts in tqdm(batches(stream, settings.step_docs), total=total, desc="ted-tok drift", unit="step",
                      disable=not progress):
        tedtok.observe_texts(texts)
    evolved = tedtok.tokenizer
    bpt = {name: tok.bytes_per_token(eval_texts) for name, tok in (("old", old), ("new", new), ("tedtok", evolved))}
    return {
        "bytes_per_token": bpt,
        # Undefined (null) when Old and New compress the held-out documents equally well.
        "gap_closed": (bpt["tedtok"] - bpt["old"]) / gap if (gap := bpt["new"] - bpt["old"]) else None,
        "jaccard": {"old_vs_new": jaccard_distance(old, new), "tedtok_vs_new": jaccard_distance(evolved, new)},
        "ids_stable": ids_stable(old, evolved),
        "seconds": {"revisions": tedtok.revision_seconds, "new_training": new_seconds},
        "revisions": len(tedtok.revisions),
        "steps": total,
        "documents": {"old": len(old_texts), "stream": len(stream), "new": len(new_texts), "held_out": len(held)},
    }
