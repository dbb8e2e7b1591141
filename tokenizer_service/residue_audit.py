"""``tokmaint residues``: score a tokenizer on a corpus, remove its residues, measure the result.

One call of :func:`audit_residues` encodes the corpus three times (counting; full tokenizer for
split & re-merge; the residue-free export) and reports:

* ``vocab_size``, ``scope_size``, ``unseen``, ``residues``, ``residue_share`` (with the entropy
  filter) and ``residue_share_ratio_only`` (FI ratio alone), as :mod:`litetoken` defines them;
* ``tokens.{original,split,remerged}``: corpus tokens with the full tokenizer, after splitting
  the residues only, and after split & re-merge; ``lossless``: every document decodes back (to itself as the
  tokenizer's normalizer promises it, :mod:`round_trip`);
* the export: residues it removed, residues it kept as scaffolding (a standard BPE cannot form
  some surviving tokens without them), rewired tokens, and ``export_agreement``: the share of
  documents the exported ``tokenizer.json`` encodes exactly like split & re-merge of the
  residues it removed (``export_agreement_all_residues``: against split & re-merge of every
  flagged residue, scaffolding included).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import field_validator
from tqdm import tqdm

from schemas.revision import RevisionDiff
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.litetoken import (
    CorpusCounts,
    ResidueReport,
    TokenScores,
    count_corpus,
    find_residues,
    score_tokens,
)
from tokenizer_service.merge_graph import MergeGraph
from tokenizer_service.residue_removal import ResidueRemoval, SplitRemerge, residue_free_tokenizer
from tokenizer_service.round_trip import RoundTrip
from tokenizer_service.settings import Number, Settings, SettingsConfigDict, setting, whole


AUDIT_OUTPUTS = (r"tokenizer\.json", r"diff\.json", r"scores\.parquet")


class ResidueOptions(Settings):
    """Thresholds (None: the paper's for the kind, detected unless given), log base, scope, evidence
    (environment: ``TOKMAINT_RESIDUES_*``)."""

    model_config = SettingsConfigDict(env_prefix="TOKMAINT_RESIDUES_")

    r: float | None = setting(
        None, Number(float, low=0, high=1), "FI ratio threshold (default: 0.15 classic BPE, 0.05 tiktoken-style)"
    )
    s: float | None = setting(
        None, Number(float, low=0), "entropy threshold (default: 4.0 classic BPE, 3.5 tiktoken-style)"
    )
    log_base: float = setting(math.e, Number(float, low=1, low_open=True), "entropy log base (e: nats)")
    kind: Literal["auto", "classic", "tiktoken"] = setting(
        "auto",
        None,
        "which of the paper's threshold pairs r, s apply (auto: tiktoken-style when the file has "
        "ignore_merges or several merges for one token; GPT-4o's has neither)",
    )
    scope: Literal["ascii", "all"] = setting(
        "ascii", None, "tokens the share counts: all-ASCII tokens (the paper's) or all"
    )
    min_count: int | Literal["auto"] = setting(
        0, None, "evidence a test needs to flag a token: a whole number, or 'auto' = ceil(log_base^s) (0: the paper's)"
    )
    batch_size: int = setting(2000, whole(1), "documents encoded per batch")

    @field_validator("min_count")
    @classmethod
    def _evidence(cls, value: int | str) -> int | str:
        if value != "auto" and not whole(0).allows(value):
            raise ValueError(f"min_count must be a whole number ≥ 0 or 'auto', got {value!r}")
        return value


@dataclass(frozen=True)
class ResidueAudit:
    """Everything one audit produced: the JSON summary plus the objects ``--out`` writes."""

    summary: dict[str, Any]
    report: ResidueReport
    scores: TokenScores
    removal: ResidueRemoval


def score_and_flag(
    tokenizer: BPETokenizer, counts: CorpusCounts, options: ResidueOptions, *, graph: MergeGraph
) -> tuple[TokenScores, ResidueReport]:
    """The scores of every id from ``counts`` and the residues they flag under ``options``.

    Shared by the corpus audit and the streaming job, which differ only in where the counts come
    from (a corpus encoded here, or the stream's statistics)."""
    scores = score_tokens(tokenizer, counts, graph=graph, log_base=options.log_base)
    report = find_residues(
        tokenizer,
        scores,
        graph=graph,
        **options.model_dump(include={"r", "s", "scope", "min_count", "log_base"}),
        kind=None if options.kind == "auto" else options.kind,
    )
    return scores, report


def audit_residues(
    tokenizer: BPETokenizer, texts: list[str], options: ResidueOptions | None = None, *, progress: bool = False
) -> ResidueAudit:
    options = options or ResidueOptions()
    started = time.perf_counter()
    graph = MergeGraph(tokenizer)
    counts = count_corpus(tokenizer, texts, batch_size=options.batch_size, progress=progress)
    scores, report = score_and_flag(tokenizer, counts, options, graph=graph)
    removal = residue_free_tokenizer(tokenizer, report.residues, graph=graph)
    every = SplitRemerge(tokenizer, report.residues, graph=graph)
    removed = SplitRemerge(tokenizer, removal.removed, graph=graph)
    promise = RoundTrip.of(tokenizer.hf)
    tokens = {"original": 0, "split": 0, "remerged": 0}
    lossless = agree = agree_all = 0
    for start in tqdm(
        range(0, len(texts), options.batch_size), desc="split & re-merge", unit="batch", disable=not progress
    ):
        batch = texts[start : start + options.batch_size]
        encodings = tokenizer.hf.encode_batch(batch, add_special_tokens=False)
        lite, lite_removed = every.apply(encodings), removed.apply(encodings)
        exported = removal.tokenizer.encode_batch(batch)
        decoded = tokenizer.hf.decode_batch([e.ids for e in lite], skip_special_tokens=False)
        tokens["original"] += sum(len(e.original) for e in lite)
        tokens["split"] += sum(e.split_tokens for e in lite)
        tokens["remerged"] += sum(len(e.ids) for e in lite)
        lossless += sum(d == t for d, t in zip(decoded, promise.promised(batch)))
        agree += sum(x == e.ids for x, e in zip(exported, lite_removed))
        agree_all += sum(x == e.ids for x, e in zip(exported, lite))
    n = max(len(texts), 1)
    vocab = tokenizer.vocab
    summary = {
        "vocab_size": len(vocab),
        "kind": report.kind,
        "thresholds": {"r": report.r, "s": report.s, "log_base": options.log_base, "min_count": report.min_count},
        "scope": options.scope,
        "scope_size": report.scope_size,
        "unseen": report.unseen,
        "residues": len(report.residues),
        "residue_share": report.residue_share,
        "residues_ratio_only": len(report.ratio_only),
        "residue_share_ratio_only": report.residue_share_ratio_only,
        "documents": len(texts),
        "tokens": tokens,
        "tokens_change": {
            "split": tokens["split"] / max(tokens["original"], 1) - 1,
            "remerged": tokens["remerged"] / max(tokens["original"], 1) - 1,
        },
        "lossless": lossless == len(texts),
        "export": {
            "removed": len(removal.removed),
            "scaffolding": len(removal.scaffolding),
            "rewired": len(removal.rewired),
            "vocab_size": len(vocab) - len(removal.removed),
        },
        "export_agreement": agree / n,
        "export_agreement_all_residues": agree_all / n,
        "top_residues": [
            {
                "token": t,
                "id": vocab[t],
                "f1": float(scores.f1[vocab[t]]),
                "f2": float(scores.f2[vocab[t]]),
                "ratio": float(scores.ratio[vocab[t]]),
                "entropy": float(scores.s[vocab[t]]),
            }
            for t in report.residues[:20]
        ],
        "seconds": time.perf_counter() - started,
    }
    return ResidueAudit(summary=summary, report=report, scores=scores, removal=removal)


def write_audit(audit: ResidueAudit, tokenizer: BPETokenizer, options: ResidueOptions, out: Path) -> None:
    """``tokenizer.json`` (residue-free), ``diff.json`` (a revision diff) and ``scores.parquet``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    exported = audit.removal.tokenizer
    diff = RevisionDiff(
        lineage="litetoken",
        version=2,
        parent_version=1,
        tokenizer_sha256=exported.sha256,
        parent_sha256=tokenizer.sha256,
        vocab_size=len(exported),
        id_space=exported.id_space,
        entries=audit.removal.entries,
        config={"litetoken": options.model_dump() | {"r": audit.report.r, "s": audit.report.s}},
    )
    exported.save(out / "tokenizer.json")
    (out / "diff.json").write_text(diff.to_json(), encoding="utf-8")
    residues, removed = set(audit.report.residues), set(audit.removal.removed)
    items = sorted(tokenizer.vocab.items(), key=lambda kv: kv[1])
    ids = np.array([i for _, i in items], np.int64)
    s = audit.scores
    table = pa.table(
        {
            "id": ids,
            "token": [t for t, _ in items],
            "bytes": [tokenizer.token_bytes(t) for t, _ in items],
            "f1": s.f1[ids],
            "f2": s.f2[ids],
            "ratio": s.ratio[ids],
            "entropy_left": s.s_left[ids],
            "entropy_right": s.s_right[ids],
            "entropy": s.s[ids],
            "residue": [t in residues for t, _ in items],
            "removed": [t in removed for t, _ in items],
        }
    )
    pq.write_table(table, out / "scores.parquet")
