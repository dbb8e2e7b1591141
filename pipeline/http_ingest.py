"""Producers that post over HTTP: ``POST /v1/streams/{topic}/documents`` (``tokmaint ingest-server``).

The shape of Confluent's REST Proxy, kept small: a body of NDJSON (``application/x-ndjson``, one
document a line) or a JSON array of documents; each record is checked with the stream's own
rules (``schemas.document``); the good ones go to the topic keyed by id, the refused ones to the
dead-letter topic with the reason, and the answer counts both and gives the first 100 refusals'
reasons (``refusals_left_out``: how many more). A request takes at most 10,000 records
(``--max-records``); one over it is refused whole (413) before any is checked. A document dated
outside the stream's event-time window (``schemas.document.event_time_refusal``: not after 1970,
or more than ``--max-future-seconds`` ahead of the clock) is refused and dead-lettered with the
reason. JSON is JSON: ``NaN`` and ``Infinity`` are refused, and one byte-order mark at the start
of a body (what some editors write) is read past.
Answers come once the broker has acknowledged every record (``acks=all``). Writes need the
registry's bearer token (``TOKMAINT_REGISTRY_TOKEN``), or ``--insecure-dev``.

    curl -H "Authorization: Bearer $TOKMAINT_REGISTRY_TOKEN" -H 'Content-Type: application/x-ndjson' \\
         --data-binary @docs.ndjson http://127.0.0.1:8100/v1/streams/docs/documents
    {"accepted": 998, "refused": 2, "refusals": [{"record": 17, "reason": "no 'ts' field"}, ...]}
"""

from __future__ import annotations

import codecs
import json
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.concurrency import run_in_threadpool

from pipeline.kafka import Producer, Record
from pipeline.config import PipelineSettings
from pipeline.topics import dead_letter
from registry.api.deps import WriterDep, read_body
from registry.api.errors import install_error_shape
from registry.api.in_flight import NO_TELEMETRY, InFlight, InFlightLimit, Limits
from registry.config import RegistrySettings
from schemas.document import RecordError, decode_document, event_time_refusal
from schemas.json_values import parse_whole, refuse_constant


def _records(body: bytes, content_type: str, limit: int) -> list[bytes]:
    """The body's records as bytes: NDJSON lines, or a JSON array's elements (each re-encoded);
    a body of more than ``limit`` is refused whole (413) before any is checked: NDJSON by its
    lines, blank ones included (counted in C), an array as it is read.

    >>> _records(b'{"a": 1}\\n\\n{"b": 2}\\n', "application/x-ndjson", 3)
    [b'{"a": 1}', b'{"b": 2}']
    >>> _records(b'[{"a": 1}, [2]]', "application/json", 2)
    [b'{"a": 1}', b'[2]']
    """
    if content_type.split(";")[0].strip() == "application/json":
        return [_record_bytes(item) for item in _array_items(body, limit)]
    if (lines := body.count(b"\n") + (not body.endswith(b"\n"))) > limit:
        raise HTTPException(
            413,
            detail=f"the body has {lines:,} lines; a request takes at most {limit:,} records "
            "(send them in smaller requests)",
        )
    return [line for line in body.split(b"\n") if line.strip()]


def _array_items(body: bytes, limit: int) -> list[Any]:
    """A JSON array's elements, read one at a time: refused (413) at the ``limit + 1``-th, before
    the rest is parsed (``[{}, {}, ...]`` of 64 MB would be 20 million dicts).

    >>> _array_items(b' [1, {"a": [2]} ] ', 5), _array_items(b"[]", 5)
    ([1, {'a': [2]}], [])
    >>> _array_items(b"[1,]", 5)
    Traceback (most recent call last):
    fastapi.exceptions.HTTPException: 422: the body is not JSON (Expecting value: line 1 column 4 (char 3))
    >>> _array_items(b"[NaN]", 5)
    Traceback (most recent call last):
    fastapi.exceptions.HTTPException: 422: the body is not JSON (NaN is not a JSON value)
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(422, detail=f"the body is not JSON ({str(exc)[:80]})") from None
    decoder, items = json.JSONDecoder(parse_constant=refuse_constant, parse_int=parse_whole), []
    at = _skip_space(text, 0)
    if not text.startswith("[", at):
        raise HTTPException(422, detail="a JSON body must be an array of documents")
    at = _skip_space(text, at + 1)
    try:
        while not text.startswith("]", at):  # an element, then a comma and another, or the end
            if len(items) == limit:
                raise HTTPException(
                    413,
                    detail=f"the array has more than {limit:,} documents; a request takes at "
                    f"most {limit:,} records (send them in smaller requests)",
                )
            item, at = decoder.raw_decode(text, at)
            items.append(item)
            at = _skip_space(text, at)
            if not text.startswith(",", at):
                break
            at = _skip_space(text, at + 1)
            if text.startswith("]", at):
                raise json.JSONDecodeError("Expecting value", text, at)
        if not text.startswith("]", at):
            raise json.JSONDecodeError("expected ',' or ']'", text, at)
        if _skip_space(text, at + 1) != len(text):
            raise json.JSONDecodeError("extra data after the array", text, at + 1)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise HTTPException(422, detail=f"the body is not JSON ({str(exc)[:80]})") from None
    except ValueError as exc:  # NaN, or a number too long: the reason is the rule's
        raise HTTPException(422, detail=f"the body is {exc}") from None
    return items


def _skip_space(text: str, at: int) -> int:
    """The index of the first non-whitespace character (JSON's four) from ``at``.

    >>> _skip_space(" \\t\\n x", 0)
    4
    """
    while at < len(text) and text[at] in " \t\n\r":
        at += 1
    return at


def _record_bytes(item: Any) -> bytes:
    """An array element as a record's bytes. One holding a lone surrogate (``"\\ud800"``) stays
    escaped, so the document's rules refuse it with the reason instead of the encoder failing.

    >>> _record_bytes(["é"]), _record_bytes([chr(0xD800)])
    (b'["\\xc3\\xa9"]', b'["\\\\ud800"]')
    """
    try:
        return json.dumps(item, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(item).encode("utf-8")


def create_ingest_app(
    settings: PipelineSettings,
    *,
    token: str | None,
    insecure_dev: bool = False,
    max_body_bytes: int = 64 << 20,
    max_records: int = 10_000,
    max_reasons: int = 100,
    limits: Limits = Limits(),
) -> FastAPI:
    """The ingest app for ``settings`` (its docs topic only) behind the bearer ``token``. A body
    of more than ``max_records`` records is refused whole (413); an answer names the first
    ``max_reasons`` refusals (and counts them all). Past ``limits.requests`` requests at once (or
    a client's share of them), one more is answered 503 with Retry-After (nothing of it produced);
    a slow upload 408 (``registry.api.in_flight``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.producer = Producer(
            settings.bootstrap, max_record_bytes=2 * settings.max_record_bytes, compression="zstd"
        )
        yield
        app.state.producer.close()

    app = FastAPI(title="tokmaint ingest", version="1", lifespan=lifespan, telemetry=NO_TELEMETRY)
    install_error_shape(app)
    app.state.in_flight = InFlight(limits, write_token=token)
    app.add_middleware(InFlightLimit, state=app.state.in_flight)
    # The registry's writer check reads its settings: the same token, the same rule.
    app.state.settings = RegistrySettings(token=token, insecure_dev=insecure_dev)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        """200 while the server answers; ``saturated`` once every request place is taken."""
        return app.state.in_flight.health()

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        """As ``/healthz``, but 503 while saturated (for a readiness probe)."""
        health = app.state.in_flight.health()
        return JSONResponse(health, status_code=503 if health["saturated"] else 200)

    @app.post("/v1/streams/{topic}/documents")
    async def post_documents(topic: str, request: Request, writer: WriterDep) -> dict[str, Any]:
        """Check each document; produce the good ones, dead-letter the rest; counts and reasons."""
        if topic != settings.docs_topic:
            raise HTTPException(404, detail=f"no stream {topic!r} here (this one takes {settings.docs_topic!r})")
        # A byte-order mark says only "UTF-8" here; JSON forbids it, and some editors write it.
        body = (await read_body(request, max_body_bytes)).removeprefix(codecs.BOM_UTF8)
        records = _records(body, request.headers.get("content-type", "application/x-ndjson"), max_records)
        return await run_in_threadpool(_produce, request.app.state.producer, records)

    def _produce(producer: Producer, records: list[bytes]) -> dict[str, Any]:
        """Every record produced once or dead-lettered with its reason; the answer says which.

        A record the broker refuses (too large for it, say) is dead-lettered like one the rules
        refuse. Only a record that reached neither topic fails the request (503), naming it, so
        that a client resends just those.
        """
        reasons: dict[int, str] = {}
        good: list[tuple[int, Record]] = []
        now = datetime.now(timezone.utc)
        for k, value in enumerate(records):
            try:
                doc = decode_document(value, max_bytes=settings.max_record_bytes)
            except RecordError as exc:
                reasons[k] = str(exc)
                continue
            if reason := event_time_refusal(doc.ts, now=now, max_future_seconds=settings.max_future_seconds):
                reasons[k] = reason
                continue
            good.append((k, Record(value, key=doc.id.encode("utf-8"), timestamp=doc.ts_ms)))
        outcomes = producer.deliver(settings.docs_topic, [record for _, record in good], timeout=30)
        for (k, _), error in zip(good, outcomes):
            if error is not None:
                reasons[k] = f"the broker refused it: {error}"
        dead = []
        for k, reason in sorted(reasons.items()):
            value, headers = dead_letter(
                records[k], reason, limit=settings.max_record_bytes, source=f"http {settings.docs_topic}", line=k + 1
            )
            dead.append((k, Record(value, headers=headers)))
        outcomes = producer.deliver(settings.dlq_topic, [record for _, record in dead], timeout=30)
        lost = [f"record {k}: {error}" for (k, _), error in zip(dead, outcomes) if error is not None]
        if lost:
            raise HTTPException(
                503,
                detail=f"{len(lost)} records reached neither {settings.docs_topic!r} nor "
                f"{settings.dlq_topic!r} (send them again): " + "; ".join(lost[:5]),
            )
        shown = sorted(reasons.items())[:max_reasons]
        return {
            "accepted": len(records) - len(reasons),
            "refused": len(reasons),
            "refusals": [{"record": k, "reason": reason} for k, reason in shown],
            "refusals_left_out": len(reasons) - len(shown),
        }

    return app
