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
from kafka import KafkaProducer

from pipeline.topics import PipelineSettings, dead_letter_headers
from registry.api.deps import WriterDep
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
        return [json.dumps(item, ensure_ascii=False).encode("utf-8") for item in items]
    return [line for line in body.split(b"\n") if line.strip()]


def create_ingest_app(settings: PipelineSettings, *, token: str | None, insecure_dev: bool = False,
                      max_body_bytes: int = 64 << 20) -> FastAPI:
    """The ingest app for ``settings`` (its docs topic only) behind the bearer ``token``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks="all", enable_idempotence=True,
                                           compression_type="zstd", linger_ms=5,
                                           max_request_size=max(settings.max_record_bytes * 2, 1 << 20))
        yield
        app.state.producer.close()

    app = FastAPI(title="tokmaint ingest", version="1", lifespan=lifespan)
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
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body_bytes:
            raise HTTPException(413, detail=f"the body is {int(declared):,} bytes; the limit is {max_body_bytes:,}")
        body = await request.body()
        if len(body) > max_body_bytes:
            raise HTTPException(413, detail=f"the body is {len(body):,} bytes; the limit is {max_body_bytes:,}")
        records = _records(body, request.headers.get("content-type", "application/x-ndjson"))
        return await run_in_threadpool(_produce, request.app.state.producer, records)

    def _produce(producer: KafkaProducer, records: list[bytes]) -> dict[str, Any]:
        futures, refusals = [], []
        for k, value in enumerate(records):
            try:
                doc = decode_document(value, max_bytes=settings.max_record_bytes)
            except RecordError as exc:
                refusals.append({"record": k, "reason": str(exc)})
                futures.append(producer.send(settings.dlq_topic, value=value, headers=dead_letter_headers(
                    str(exc), source=f"http {settings.docs_topic}", line=k + 1)))
                continue
            futures.append(producer.send(settings.docs_topic, value=value, key=doc.id.encode("utf-8")))
        producer.flush()
        for future in futures:
            future.get(timeout=30)  # a refusal by the broker is a 500: the client sends the batch again
        return {"accepted": len(records) - len(refusals), "refused": len(refusals), "refusals": refusals}

    return app

