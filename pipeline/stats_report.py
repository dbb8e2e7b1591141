"""``tokmaint stats show``: where a lineage's statistics stand, read from Redis; ``tokmaint stats
snapshot``: all of them at one step, to Parquet, for audit (what a CronJob runs).

The step, the version it counts with, the offsets it resumes from, the table sizes, and the
tokens and pairs with the largest τ, the sinks with the smallest (Ted-Tok's next candidates for
deletion), named by the version's tokenizer, and the latest residues ``residues-job`` found.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.redis_store import RedisStatsStore
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import unpack_pair
from tokenizer_service.errors import TokmaintError
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
        "lineage": store.lineage,
        "step": meta["step"],
        "version": meta["version"],
        "offsets": {str(p): o for p, o in sorted(meta["offsets"].items())},
        "revised_at_step": meta["revised"],
        "pending_revision": store.pending() is not None,
        "tracked_tokens": int(np.count_nonzero(tau)),
        "tracked_pairs": store.tracked_pairs,
        "tokens": {name(int(ids[k])): float(tau[k]) for k in strongest},
        "pairs": {" ".join(map(name, unpack_pair(int(k)))): float(v) for k, v in zip(keys, values)},
        "weakest_sinks": {sinks[k]: float(sink_tau[k]) for k in weakest},
        "residues": store.residues() or {"version": None, "residues": []},  # the latest residues-job's
    }


def _check_snapshot(folder: Path, *, lineage: str, step: int) -> None:
    """Refuse a step folder that is not a snapshot of ``lineage`` at ``step`` (a folder of the
    user's, one that was edited or cut short): it is kept as it is, never taken for the snapshot.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "meta.json").write_text("{")
    >>> _check_snapshot(folder, lineage="news", step=3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tokenizer_service.errors.TokmaintError: ... is not a snapshot of lineage 'news' at step 3 (its meta.json \
is not JSON); move it, or snapshot into another --out
    """
    meta_file = folder / "meta.json"
    try:
        written = json.loads(meta_file.read_text(encoding="utf-8"))
        if not isinstance(written, dict):
            reason: str | None = "its meta.json is not a JSON object"
        elif (written.get("lineage"), written.get("step")) != (lineage, step):
            reason = f"its meta.json is of lineage {written.get('lineage')!r} at step {written.get('step')!r}"
        else:
            reason = None
    except FileNotFoundError:
        reason = "it has no meta.json"
    except (ValueError, UnicodeDecodeError):
        reason = "its meta.json is not JSON"
    except OSError as exc:
        reason = f"its meta.json cannot be read: {exc.strerror or exc}"
    if reason is not None:
        raise TokmaintError(
            f"{folder} is not a snapshot of lineage {lineage!r} at step {step} ({reason}); move it, or snapshot "
            "into another --out"
        )


def stats_snapshot(store: RedisStatsStore, tokenizer: BPETokenizer, out: str | Path, *, attempts: int = 5) -> Path:
    """Write the lineage's statistics at one step to ``out/<lineage>/step-<N>/`` for audit:
    ``tokens.parquet`` (id, token, τ_token, τ_buffer for every id of the version),
    ``pairs.parquet`` (first, second, τ_pair), ``neighbours.parquet`` (LiteToken's, when kept)
    and ``meta.json`` (step, version, offsets). Written whole or not at all (a folder renamed
    into place); the tables are read again when a step was written meanwhile, at most
    ``attempts`` times. An existing snapshot of the same step is kept as it is; a folder of that
    step that is no snapshot of it is refused."""
    for _ in range(attempts):
        meta = store.meta()
        ids = np.fromiter(tokenizer.vocab.values(), np.int64, len(tokenizer.vocab))
        tokens = pa.table(
            {"id": ids, "token": list(tokenizer.vocab), "tau_token": store.token(ids), "tau_buffer": store.buffer(ids)}
        )
        keys, values = store.top_pairs(store.tracked_pairs)
        first, second = zip(*map(unpack_pair, map(int, keys))) if len(keys) else ((), ())
        pairs = pa.table(
            {
                "first": pa.array(first, pa.int64()),
                "second": pa.array(second, pa.int64()),
                "tau_pair": pa.array(values, pa.float64()),
            }
        )
        neighbours = store.neighbours()
        if store.meta() == meta:
            break
    else:
        raise TokmaintError(
            f"lineage {store.lineage!r}: its statistics moved on during {attempts} reads; "
            "snapshot again, or while the job is stopped"
        )
    folder = Path(out) / store.lineage / f"step-{meta['step']:09d}"
    if folder.exists():
        _check_snapshot(folder, lineage=store.lineage, step=meta["step"])
        return folder
    staging = folder.with_name(f".{folder.name}.{os.getpid()}.part")
    staging.mkdir(parents=True, exist_ok=True)
    pq.write_table(tokens, staging / "tokens.parquet")
    pq.write_table(pairs, staging / "pairs.parquet")
    if neighbours:
        left, right = zip(*neighbours)
        pq.write_table(
            pa.table({"left": list(left), "right": list(right), "tau": list(neighbours.values())}),
            staging / "neighbours.parquet",
        )
    (staging / "meta.json").write_text(
        json.dumps(
            {
                "lineage": store.lineage,
                "step": meta["step"],
                "version": meta["version"],
                "tokenizer_sha256": tokenizer.sha256,
                "offsets": {str(p): o for p, o in sorted(meta["offsets"].items())},
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    os.replace(staging, folder)
    return folder
