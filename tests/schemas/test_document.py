"""The stream's Document record: every rule, each refusal with its reason."""

import json

import pytest

from schemas.document import RecordError, StreamDocument, decode_document, encode_document

GOOD = {"id": "d1", "text": "hello", "ts": "2021-05-04T10:00:00Z", "source": "feed"}


def record(**changes) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def test_a_document_round_trips():
    doc = decode_document(record())
    assert doc == StreamDocument(id="d1", text="hello", ts=doc.ts, source="feed") and doc.ts.hour == 10
    assert decode_document(encode_document(doc)) == doc


@pytest.mark.parametrize(
    "value, reason",
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "expected a JSON object, got a list"),
        (b'{"id": "a", "id": "b", "text": "x", "ts": "2021"}', "key 'id' appears twice"),
        (json.dumps({"text": "x", "ts": "2021"}).encode(), "no 'id' field"),
        (record(id=""), "'id' is empty"),
        (record(id=7), "'id' must be a string, got a number"),
        (record(id="x" * 257), "'id' must hold at most 256 characters"),
        (json.dumps({"id": "a", "ts": "2021"}).encode(), "no 'text' field"),
        (record(text=None), "'text' must be a string, got null"),
        (json.dumps({"id": "a", "text": "x"}).encode(), "no 'ts' field"),
        (record(ts=1620000000), "'ts' must be an ISO-8601 string, got a number"),
        (record(ts="yesterday"), "'ts' is not an ISO-8601 time"),
        (record(source=["a"]), "'source' must be a string, got a list"),
        (b'{"id": "a", "text": "\\ud800", "ts": "2021"}', "lone surrogate"),
        (b'{"id": "a", "text": "\xff", "ts": "2021"}', "not UTF-8 (byte 0xff at offset 21)"),
        (record(text="x" * 2000), "larger than the limit (2,"),
    ],
)
def test_bad_records_are_refused_with_the_reason(value, reason):
    with pytest.raises(RecordError) as refused:
        decode_document(value, max_bytes=1024)
    assert reason in str(refused.value)
