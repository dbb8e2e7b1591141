"""The stream's ``Document`` record (``document.schema.json``): decoded from a record's bytes with
every rule checked, or refused with the reason a dead-letter record carries.

The rules are the corpus reader's (``tokenizer_service.corpus``: a JSON object, no key twice, a
string ``text``, an ISO-8601 ``ts``) plus what a stream needs: an ``id``, a ``ts`` on every
record, a size limit, and valid UTF-8 for the whole record.

>>> doc = decode_document(b'{"id": "a1", "text": "hello", "ts": "2021-05-04T10:00:00+02:00"}')
>>> doc.id, doc.ts.isoformat(), doc.source
('a1', '2021-05-04T08:00:00+00:00', '')
>>> decode_document(encode_document(doc)) == doc
True
>>> decode_document(b'{"id": "a1", "text": null, "ts": "2021"}')
Traceback (most recent call last):
...
schemas.document.RecordError: 'text' must be a string, got null
>>> decode_document(json.dumps({"id": chr(0xD800), "text": "x", "ts": "2021"}).encode())
Traceback (most recent call last):
...
schemas.document.RecordError: 'id' holds a lone surrogate (not valid Unicode)
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from schemas.json_values import json_kind, json_object, parse_timestamp

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

DEFAULT_MAX_BYTES = 1 << 20  # 1 MiB a record, Kafka's own default limit
# How far ahead of the clock a document's ts may be: a producer's clock off by hours, or a local
# time sent as UTC, stays within it; a made-up date (2099) does not.
DEFAULT_MAX_FUTURE_SECONDS = 86_400.0


class RecordError(ValueError):
    """A record that is not a Document; the message is the reason."""


class StreamDocument(NamedTuple):
    """One document of the stream; ``ts`` is an aware UTC datetime. (A named tuple: a step
    decodes a thousand of them, and a frozen dataclass took 3x as long to make.)"""

    id: str
    text: str
    ts: datetime
    source: str = ""

    @property
    def ts_ms(self) -> int:
        """``ts`` in whole milliseconds since the epoch (rounded down): the Kafka record's timestamp.

        >>> StreamDocument("a", "x", datetime(1970, 1, 1, 0, 0, 1, 999, tzinfo=timezone.utc)).ts_ms
        1000
        """
        return (self.ts - EPOCH) // timedelta(milliseconds=1)


def event_time_refusal(ts: datetime, *, now: datetime, max_future_seconds: float) -> str | None:
    """Why a document's event time ``ts`` is outside the stream's window, or None inside it. The
    window opens after the epoch (a Kafka timestamp of 0 is "now" to its clients, and one before
    the epoch makes a window no job writes) and closes ``max_future_seconds`` after the clock
    (``now``): a document dated ahead would move the stream's event time past every document to
    come, which would then be late.

    >>> now = datetime(2026, 12, 2, tzinfo=timezone.utc)
    >>> event_time_refusal(now + timedelta(hours=1), now=now, max_future_seconds=86_400) is None
    True
    >>> event_time_refusal(datetime(2099, 1, 1, tzinfo=timezone.utc), now=now, max_future_seconds=86_400)
    'ts 2099-01-01T00:00:00+00:00 is more than 86,400 s (--max-future-seconds) ahead of the clock \
(2026-12-02T00:00:00+00:00): a wrong clock or date; counted, it would make every document after it late'
    >>> event_time_refusal(EPOCH, now=now, max_future_seconds=86_400)
    'ts 1970-01-01T00:00:00+00:00 is not after the epoch: Kafka timestamps start after \
1970-01-01T00:00:00Z (0 is "now" to a Kafka client, and a window before it is never written)'
    """
    if ts <= EPOCH:
        return (
            f"ts {ts.isoformat()} is not after the epoch: Kafka timestamps start after 1970-01-01T00:00:00Z "
            '(0 is "now" to a Kafka client, and a window before it is never written)'
        )
    if ts > now + timedelta(seconds=max_future_seconds):
        return (
            f"ts {ts.isoformat()} is more than {max_future_seconds:,g} s (--max-future-seconds) ahead of the clock "
            f"({now.isoformat(timespec='seconds')}): a wrong clock or date; counted, it would make every "
            "document after it late"
        )
    return None


def _string(record: dict[str, Any], key: str, *, required: bool, limit: int | None = None) -> str:
    if key not in record:
        if required:
            raise RecordError(f"no {key!r} field")
        return ""
    value = record[key]
    if not isinstance(value, str):
        raise RecordError(f"{key!r} must be a string, got {json_kind(value)}")
    if limit is not None and len(value) > limit:
        raise RecordError(f"{key!r} must hold at most {limit} characters, got {len(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # JSON's "\ud800" escape decodes to a str no UTF-8 can hold
        raise RecordError(f"{key!r} holds a lone surrogate (not valid Unicode)") from None
    return value


def decode_document(value: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES) -> StreamDocument:
    """The Document in a record's value, or :class:`RecordError` with the reason it is not one."""
    if len(value) > max_bytes:
        raise RecordError(f"larger than the limit ({len(value):,} bytes > {max_bytes:,})")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"not UTF-8 (byte 0x{value[exc.start]:02x} at offset {exc.start})") from None
    if text.startswith("\ufeff"):  # JSON forbids it; without a word it reads as "Expecting value"
        raise RecordError("not JSON (it starts with a byte-order mark, U+FEFF)")
    try:
        record = json_object(text)
    except ValueError as exc:
        raise RecordError(str(exc)) from None
    doc_id = _string(record, "id", required=True, limit=256)
    if not doc_id:
        raise RecordError("'id' is empty")
    body = _string(record, "text", required=True)
    if "ts" not in record:
        raise RecordError("no 'ts' field")
    try:
        ts = parse_timestamp(record["ts"])
    except ValueError as exc:
        raise RecordError(str(exc)) from None
    return StreamDocument(doc_id, body, ts, _string(record, "source", required=False, limit=256))


def encode_document(doc: StreamDocument) -> bytes:
    """A Document as a record's value (UTF-8 JSON)."""
    record = {"id": doc.id, "text": doc.text, "ts": doc.ts.isoformat()}
    if doc.source:
        record["source"] = doc.source
    return json.dumps(record, ensure_ascii=False).encode("utf-8")
