"""``tokmaint stats show``: where a lineage's statistics stand, read from Redis.

The step, the version it counts with, the offsets it resumes from, the table sizes, and the
tokens and pairs with the largest τ, the sinks with the smallest (Ted-Tok's next candidates for
deletion), named by the version's tokenizer, and the latest residues ``residues-job`` found.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.redis_store import RedisStatsStore
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import unpack_pair
from tokenizer_service.merge_graph import MergeGraph


def stats_report(store: RedisStatsStore, tokenizer: BPETokenizer, *, top: int = 20) -> dict[str, Any]:
    """The lineage's state and its top ``top`` tokens, pairs and weakest sinks, as JSON-ready data."""
    meta = store.meta()
    ids = np.fromiter(tokenizer.vocab.values(), np.int64, len(tokenizer.vocab))
    tau = store.token(ids)
    strongest = np.argsort(-tau, kind="stable")[:top]
    sinks = sorted(MergeGraph(tokenizer).sink_tokens, key=tokenizer.vocab.__getitem__)
    sink_tau = store.token(np.array([tokenizer.vocab[t] for t in sinks], np.int64))
    weakest = np.argsort(sink_tau, kind="stable")[:top]
    keys, values = store.top_pairs(top)

    def name(i: int) -> str:
        return tokenizer.id_to_token.get(i, f"<{i}>")

    return {
        "lineage": store.lineage, "step": meta["step"], "version": meta["version"],
        "offsets": {str(p): o for p, o in sorted(meta["offsets"].items())}, "revised_at_step": meta["revised"],
        "pending_revision": store.pending() is not None, "tracked_tokens": int(np.count_nonzero(tau)),
        "tracked_pairs": store.tracked_pairs,
        "tokens": {name(int(ids[k])): float(tau[k]) for k in strongest},
        "pairs": {" ".join(map(name, unpack_pair(int(k)))): float(v) for k, v in zip(keys, values)},
        "weakest_sinks": {sinks[k]: float(sink_tau[k]) for k in weakest},
        "residues": store.residues() or {"version": None, "residues": []},  # the latest residues-job's
    }
