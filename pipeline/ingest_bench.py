"""``tokmaint bench ingest``: the load the ingest server takes, and that it loses nothing past it.

It starts its own broker and ``tokmaint ingest-server`` (``max_in_flight`` requests at once),
then posts documents open loop at rates doubling from ``start_rps`` (``registry.load_test``), each
request an NDJSON batch of ``docs_per_request`` documents of the corpus under fresh ids. It
reports the highest rate served whole with p99 ≤ 500 ms, the rate where the p99 passes it, what
the server answered past that (503 with Retry-After), any request left unanswered, and then
reads the docs topic back: every document of a request answered 200 must be there exactly once,
and none of a refused one (``documents.{accepted,on_topic,lost,duplicated,refused_but_produced}``).
"""

from __future__ import annotations

import json
import secrets
import tempfile
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.local_servers import start_broker
from pipeline.kafka import read_topic
from registry.load_test import LoadRampSettings, LoadRequest, load_ramp
from registry.local_server import start_service
from tokenizer_service.corpus import read_corpus
from tokenizer_service.settings import SettingsConfigDict, setting, whole

TOPIC = "docs"


class IngestBenchSettings(LoadRampSettings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_INGEST_")

    docs: int = setting(1000, whole(1), "documents of the corpus the requests take their texts from")
    docs_per_request: int = setting(10, whole(1), "documents in each request's NDJSON body")


def document_batches(texts: list[str], *, per_request: int, token: str) -> Callable[[int], LoadRequest]:
    """Request ``i``: a POST of ``per_request`` documents with ids ``load-i-0``, ``load-i-1``, …

    >>> request = document_batches(["a b"], per_request=2, token="t")(7)
    >>> [json.loads(line)["id"] for line in request.body.splitlines()]
    ['load-7-0', 'load-7-1']
    """
    ts = datetime.now(UTC).isoformat()
    headers = (("Authorization", f"Bearer {token}"), ("Content-Type", "application/x-ndjson"))

    def make(i: int) -> LoadRequest:
        lines = [
            json.dumps(
                {"id": f"load-{i}-{k}", "ts": ts, "text": texts[(i * per_request + k) % len(texts)]}, ensure_ascii=False
            )
            for k in range(per_request)
        ]
        return LoadRequest("POST", f"/v1/streams/{TOPIC}/documents", headers, "\n".join(lines).encode("utf-8"))

    return make


def run_ingest_bench(
    corpus: str | Path, settings: IngestBenchSettings | None = None, *, progress: bool = True
) -> dict[str, Any]:
    settings = settings or IngestBenchSettings()
    texts = [d.text for d in read_corpus(corpus, progress=progress).documents[: settings.docs]]
    token = secrets.token_hex(16)
    broker, bootstrap = start_broker()
    try:
        with tempfile.TemporaryDirectory(prefix="tokmaint-bench-ingest-") as root:
            server, url = start_service(
                [
                    "ingest-server",
                    "--bootstrap",
                    bootstrap,
                    "--topic",
                    TOPIC,
                    "--max-in-flight",
                    str(settings.max_in_flight),
                    # every client of the benchmark is this one address
                    "--max-in-flight-per-client",
                    str(settings.max_in_flight),
                ],
                env={"TOKMAINT_REGISTRY_TOKEN": token},
                log=Path(root) / "ingest.log",
                what="the ingest server",
            )
            try:
                ramp = load_ramp(
                    url,
                    document_batches(texts, per_request=settings.docs_per_request, token=token),
                    start_rps=settings.start_rps,
                    max_rps=settings.max_rps,
                    seconds=settings.seconds,
                    progress=progress,
                )
            finally:
                server.terminate()
                server.wait(timeout=30)
        on_topic = Counter(json.loads(record.value)["id"] for record in read_topic(bootstrap, TOPIC))
    finally:
        broker.terminate()
        broker.wait(timeout=30)
    per_request = settings.docs_per_request

    def ids(i: int) -> list[str]:
        return [f"load-{i}-{k}" for k in range(per_request)]

    accepted = [d for a in ramp.answers if a.status == 200 for d in ids(a.index)]
    refused = [d for a in ramp.answers if a.status in (429, 503) for d in ids(a.index)]
    return {
        **ramp.report(),
        "max_in_flight": settings.max_in_flight,
        "docs_per_request": per_request,
        "documents": {
            "accepted": len(accepted),
            "on_topic": sum(on_topic.values()),
            "lost": sum(on_topic[d] == 0 for d in accepted),
            "duplicated": sum(on_topic[d] > 1 for d in accepted),
            "refused_but_produced": sum(on_topic[d] > 0 for d in refused),
        },
    }
