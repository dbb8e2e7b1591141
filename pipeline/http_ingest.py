"""Producers that post over HTTP: ``POST /v1/streams/{topic}/documents`` (``tokmaint ingest-server``).

The shape of Confluent's REST Proxy, kept small: a body of NDJSON (``application/x-ndjson``, one
document a line) or a JSON array of documents; each record is checked with the stream's own
rules (``schemas.document``); the good ones go to the topic keyed by id, the refused ones to the
dead-letter topic with the reason, and the answer counts both and gives every refusal's reason.
Answers come once the broker has acknowledged every record (``acks=all``). Writes need the
registry's bearer token (``TOKMAINT_REGISTRY_TOKEN``), or ``--insecure-dev``.

    curl -H "Authorization: Bearer $TOKMAINT_REGISTRY_TOKEN" -H 'Content-Type: application/x-ndjson' \\
         --data-binary @docs.ndjson http://127.0.0.1:8100/v1/streams/docs/documents
    {"accepted": 998, "refused": 2, "refusals": [{"record": 17, "reason": "no 'ts' field"}, ...]}
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

from pipeline.kafka import Producer, Record
from pipeline.topics import PipelineSettings, dead_letter
from registry.api.deps import WriterDep, read_body
from registry.api.errors import install_error_shape
from registry.api.in_flight import InFlightLimit
from registry.config import RegistrySettings
from schemas.document import RecordError, decode_document


def _records(body: bytes, content_type: str) -> list[bytes]:
    """The body's records as bytes: NDJSON lines, or a JSON array's elements (each re-encoded)."""
    if content_type.split(";")[0].strip() == "application/json":
        try:
            items = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise HTTPException(422, detail=f"the body is not JSON ({str(exc)[:80]})") from None
        if not isinstance(items, list):
            raise HTTPException(422, detail="a JSON body must be an array of documents")
        return [_record_bytes(item) for item in items]
    return [line for line in body.split(b"\n") if line.strip()]


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


def create_ingest_app(settings: PipelineSettings, *, token: str | None, insecure_dev: bool = False,
                      max_body_bytes: int = 64 << 20, max_in_flight: int = 64) -> FastAPI:
    """The ingest app for ``settings`` (its docs topic only) behind the bearer ``token``; past
    ``max_in_flight`` requests at once, one more is answered 503 with Retry-After (nothing of it
    produced)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.producer = Producer(settings.bootstrap, max_record_bytes=2 * settings.max_record_bytes,
                                      compression="zstd")
        yield
        app.state.producer.close()

    app = FastAPI(title="tokmaint ingest", version="1", lifespan=lifespan)
    install_error_shape(app)
    app.add_middleware(InFlightLimit, limit=max_in_flight)
    # The registry's writer check reads its settings: the same token, the same rule.
    app.state.settings = RegistrySettings(token=token, insecure_dev=insecure_dev)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/streams/{topic}/documents")
    async def post_documents(topic: str, request: Request, writer: WriterDep) -> dict[str, Any]:
        """Check each document; produce the good ones, dead-letter the rest; counts and reasons."""
        if topic != settings.docs_topic:
            raise HTTPException(404, detail=f"no stream {topic!r} here (this one takes {settings.docs_topic!r})")
        body = await read_body(request, max_body_bytes)
        records = _records(body, request.headers.get("content-type", "application/x-ndjson"))
        return await run_in_threadpool(_produce, request.app.state.producer, records)

    def _produce(producer: Producer, records: list[bytes]) -> dict[str, Any]:
        """Every record produced once or dead-lettered with its reason; the answer says which.

        A record the broker refuses (too large for it, say) is dead-lettered like one the rules
        refuse. Only a record that reached neither topic fails the request (503), naming it, so
        that a client resends just those.
        """
        reasons: dict[int, str] = {}
        good: list[tuple[int, Record]] = []
        for k, value in enumerate(records):
            try:
                doc = decode_document(value, max_bytes=settings.max_record_bytes)
            except RecordError as exc:
                reasons[k] = str(exc)
                continue
            good.append((k, Record(value, key=doc.id.encode("utf-8"))))
        outcomes = producer.deliver(settings.docs_topic, [record for _, record in good], timeout=30)
        for (k, _), error in zip(good, outcomes):
            if error is not None:
                reasons[k] = f"the broker refused it: {error}"
        dead = []
        for k, reason in sorted(reasons.items()):
            value, headers = dead_letter(records[k], reason, limit=settings.max_record_bytes,
                                         source=f"http {settings.docs_topic}", line=k + 1)
            dead.append((k, Record(value, headers=headers)))
        outcomes = producer.deliver(settings.dlq_topic, [record for _, record in dead], timeout=30)
        lost = [f"record {k}: {error}" for (k, _), error in zip(dead, outcomes) if error is not None]
        if lost:
            raise HTTPException(503, detail=f"{len(lost)} records reached neither {settings.docs_topic!r} nor "
                                            f"{settings.dlq_topic!r} (send them again): " + "; ".join(lost[:5]))
        return {"accepted": len(records) - len(reasons), "refused": len(reasons),
                "refusals": [{"record": k, "reason": reason} for k, reason in sorted(reasons.items())]}

    return app

