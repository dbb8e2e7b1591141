"""``tokmaint residues-job``: LiteToken's scores of a lineage's current version from the stream's
statistics, and with ``publish`` a residue-removal version.

F1 is the token EMA (the rate each token is emitted), F2 follows from it over the merge DAG, and
the neighbour entropies come from the EMA of adjacent pairs across words; the scores are the
core's (``litetoken.score_tokens``, ``find_residues``) on those rates instead of a corpus's
counts (the ratio and the entropies do not depend on the scale). The residues are kept in Redis
and, with ``out``, written as Parquet beside the residue-free tokenizer.json and its diff. With
``publish`` that version goes to the registry (kind ``litetoken``); the streaming job adopts it
at its next step.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.redis_store import RedisStatsStore
from registry.client import RegistryClient
from schemas.revision import RevisionDiff
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import pack_pair
from tokenizer_service.errors import TokmaintError
from tokenizer_service.litetoken import CorpusCounts
from tokenizer_service.merge_graph import MergeGraph
from tokenizer_service.residue_audit import ResidueAudit, ResidueOptions, score_and_flag, write_audit
from tokenizer_service.residue_removal import residue_free_tokenizer


def stream_residues(
    store: RedisStatsStore, tokenizer: BPETokenizer, options: ResidueOptions | None = None
) -> ResidueAudit:
    """The residues of ``tokenizer`` by the statistics in ``store`` (the version they count with)."""
    options = options or ResidueOptions()
    started = time.perf_counter()
    graph = MergeGraph(tokenizer)
    vocab = tokenizer.vocab
    # Neighbour pairs are kept by the tokens' text: this version's ids for those it has.
    neighbours = store.neighbours()
    if not neighbours:  # every token's entropy would be 0: all of them residues by the S rule
        raise TokmaintError(
            f"lineage {store.lineage!r} has no neighbour statistics (the job keeps them; the "
            "streaming Beam variant keeps Ted-Tok's only)"
        )
    kept = [(vocab[a], vocab[b], tau) for (a, b), tau in neighbours.items() if a in vocab and b in vocab]
    keys = np.array([pack_pair(u, v) for u, v, _ in kept], np.int64)
    order = np.argsort(keys)
    counts = CorpusCounts(
        emitted=store.token(np.arange(tokenizer.id_space)),
        neighbour_keys=keys[order],
        neighbour_counts=np.array([tau for _, _, tau in kept], np.float64)[order],
        documents=store.step,
    )
    scores, report = score_and_flag(tokenizer, counts, options, graph=graph)
    removal = residue_free_tokenizer(tokenizer, report.residues, graph=graph)
    summary = {
        "lineage": store.lineage,
        "step": store.step,
        "vocab_size": len(vocab),
        "kind": report.kind,
        "thresholds": {"r": report.r, "s": report.s, "log_base": options.log_base},
        "scope": options.scope,
        "scope_size": report.scope_size,
        "unseen": report.unseen,
        "residues": len(report.residues),
        "residue_share": report.residue_share,
        "neighbour_pairs": len(keys),
        "export": {"removed": len(removal.removed), "vocab_size": len(removal.tokenizer)},
        "top_residues": [
            {"token": t, "id": vocab[t], "ratio": float(scores.ratio[vocab[t]]), "entropy": float(scores.s[vocab[t]])}
            for t in report.residues[:20]
        ],
        "seconds": time.perf_counter() - started,
    }
    return ResidueAudit(summary=summary, report=report, scores=scores, removal=removal)


def run_residues_job(
    store: RedisStatsStore,
    registry: RegistryClient,
    *,
    options: ResidueOptions | None = None,
    out: Path | None = None,
    publish: bool = False,
) -> dict[str, Any]:
    """Score the lineage's current version, keep the residues in Redis, write ``out``, and with
    ``publish`` publish the residue-free version (when it removes anything)."""
    options = options or ResidueOptions()
    version = store.meta()["version"] or registry.version(store.lineage).number
    record = registry.version(store.lineage, version)
    tokenizer = registry.tokenizer(store.lineage, version)
    audit = stream_residues(store, tokenizer, options)
    store.keep_residues(audit.report.residues, version=version)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_audit(audit, tokenizer, options, out)
    result = dict(audit.summary, version=version)
    exported = audit.removal.tokenizer
    if publish and audit.removal.removed:
        diff = RevisionDiff(
            lineage=store.lineage,
            version=version + 1,
            parent_version=version,
            tokenizer_sha256=exported.sha256,
            parent_sha256=record.sha256,
            vocab_size=len(exported),
            id_space=exported.id_space,
            entries=audit.removal.entries,
            config={"litetoken": {"r": audit.report.r, "s": audit.report.s}},
        )
        info = registry.publish(
            store.lineage,
            exported.to_json(),
            diff_json=diff.to_json(),
            kind="litetoken",
            parent=version,
            metrics={"residues_removed": len(audit.removal.removed)},
        )
        result["published"] = info.number
    return result
