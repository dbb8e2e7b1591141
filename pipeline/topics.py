"""The pipeline's Kafka topics and the dead-letter record's headers.

Names and the bootstrap address are settings (``pipeline.config.PipelineSettings``):

* ``docs``: the stream's documents (``schemas/document.schema.json``), keyed by document id;
* ``docs.dlq``: records that are not Documents, as they came, with headers that say why and where
  from (:func:`dead_letter_headers`);
* ``tokenizer.revisions``: the registry's revision events (``registry.relay``).

>>> dead_letter_headers("not JSON (Expecting value at column 1)", source="corpus.jsonl", line=7)
[('tokmaint.reason', b'not JSON (Expecting value at column 1)'), ('tokmaint.source', b'corpus.jsonl'), \
('tokmaint.line', b'7')]
"""

from __future__ import annotations


def dead_letter(
    value: bytes, reason: str, *, limit: int, source: str, line: int | None = None
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """A dead-letter record's value and headers: the record itself, cut to ``limit`` bytes when it is
    larger (no topic takes a record above the broker's limit; ``tokmaint.bytes`` gives its size).

    >>> value, headers = dead_letter(b"x" * 10, "too large", limit=4, source="http docs", line=3)
    >>> value, dict(headers)["tokmaint.bytes"]
    (b'xxxx', b'10')
    """
    headers = dead_letter_headers(reason, source=source, line=line)
    if len(value) > limit:
        headers.append(("tokmaint.bytes", str(len(value)).encode("utf-8")))
    return value[:limit], headers


def dead_letter_headers(
    reason: str, *, source: str, line: int | None = None, partition: int | None = None, offset: int | None = None
) -> list[tuple[str, bytes]]:
    """Kafka headers of a dead-letter record: the reason, and where the record came from (a
    file and its line, or a topic with the partition and offset)."""
    headers = [("tokmaint.reason", reason), ("tokmaint.source", source)]
    for name, value in (("line", line), ("partition", partition), ("offset", offset)):
        if value is not None:
            headers.append((f"tokmaint.{name}", str(value)))
    return [(name, value.encode("utf-8")) for name, value in headers]
