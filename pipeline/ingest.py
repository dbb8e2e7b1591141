"""``tokmaint ingest``: a corpus file onto the ``docs`` topic.

The corpus is read with the one corpus reader (``tokenizer_service.corpus``: time order, every
rule), each document becomes a ``Document`` record keyed by its id, and the producer batches,
compresses and waits for every replica (``acks=all``; idempotent, so a retried batch is not
written twice). Ids are the corpus's content hash and the document's place in time order, so
ingesting the same file again sends the same ids (consumers can de-duplicate). A document of a
corpus without times gets the ingest's start as its event time. A document over the record limit,
or dated outside the stream's event-time window (not after 1970, or more than
``max_future_seconds`` ahead of the clock: ``schemas.document.event_time_refusal``), goes to the
dead-letter topic with the reason, and with ``skip_bad`` so do the records the reader refused, as
they were read, with the file and the line: nothing is dropped silently.

    report = ingest("corpus.jsonl.gz", PipelineSettings(bootstrap="127.0.0.1:9092"))
    report["documents"], report["docs_per_s"]
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pipeline.kafka import Producer, Record
from pipeline.config import PipelineSettings
from pipeline.topics import dead_letter
from schemas.document import StreamDocument, encode_document, event_time_refusal
from tokenizer_service.corpus import read_corpus


def producer(settings: PipelineSettings, *, compression: str | None = "zstd") -> Producer:
    """A batching, compressing producer that waits for every replica and never writes a retried
    batch twice."""
    return Producer(
        settings.bootstrap,
        max_record_bytes=2 * settings.max_record_bytes,
        compression=compression,
        **{"linger.ms": 20, "batch.size": 512 * 1024},
    )


def ingest(
    path: str | Path,
    settings: PipelineSettings,
    *,
    skip_bad: bool = False,
    progress: bool = True,
    compression: str | None = "zstd",
) -> dict[str, Any]:
    """Send every document of the corpus at ``path`` to ``settings.docs_topic`` (and, with
    ``skip_bad``, every bad record to ``settings.dlq_topic``); the counts and rates."""
    corpus = read_corpus(path, skip_bad=skip_bad, progress=progress)
    started = datetime.now(timezone.utc)
    source = Path(path).name
    limit = settings.max_record_bytes
    refused: list[tuple[str, bytes, str]] = []  # documents dead-lettered: id, record, reason
    sent_bytes = 0
    clock = time.perf_counter()

    def records():
        nonlocal sent_bytes
        for k, doc in enumerate(tqdm(corpus.documents, desc=f"ingest {source}", unit="doc", disable=not progress)):
            doc_id = f"{corpus.sha256[:16]}-{k:09d}"
            document = StreamDocument(id=doc_id, text=doc.text, ts=doc.ts or started, source=source)
            record = encode_document(document)
            if len(record) > limit:
                refused.append((doc_id, record, f"larger than the limit ({len(record):,} bytes > {limit:,})"))
                continue
            if reason := event_time_refusal(document.ts, now=started, max_future_seconds=settings.max_future_seconds):
                refused.append((doc_id, record, reason))
                continue
            sent_bytes += len(record)
            yield Record(record, key=doc_id.encode(), timestamp=document.ts_ms)

    with producer(settings, compression=compression) as kafka:
        sent = kafka.send_all(settings.docs_topic, records())
        dead = [dead_letter(bad.data, bad.reason, limit=limit, source=source, line=bad.line) for bad in corpus.rejected]
        dead += [
            dead_letter(record, reason, limit=limit, source=f"{source} {doc_id}") for doc_id, record, reason in refused
        ]
        kafka.send_all(settings.dlq_topic, [Record(value, headers=headers) for value, headers in dead])
    seconds = time.perf_counter() - clock
    return {
        "corpus": str(path),
        "topic": settings.docs_topic,
        "documents": sent,
        "dlq_topic": settings.dlq_topic,
        "dead_lettered": len(dead),
        "megabytes": sent_bytes / 1e6,
        "seconds": seconds,
        "docs_per_s": sent / seconds,
        "mb_per_s": sent_bytes / 1e6 / seconds,
    }
