"""The outbox relay: sends the registry's revision events to Kafka, at least once.

Each publish wrote its ``RevisionEvent`` (``schemas/revision_event.schema.json``) to the outbox
in its own transaction. The relay sends the pending events to the topic
``tokenizer.revisions``, keyed by lineage (one partition per lineage keeps its versions in
order), waits for the broker to acknowledge them, and only then marks them sent. A relay that
dies between sending and marking sends them again on its next run, with the same ``event_id``,
so consumers de-duplicate by it.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from registry.store import Registry

TOPIC = "tokenizer.revisions"


class EventProducer(Protocol):
    """What the relay needs of a Kafka producer (kafka-python's ``KafkaProducer`` has it)."""

    def send(self, topic: str, value: bytes, key: bytes) -> Any: ...

    def flush(self, timeout: float | None = None) -> None: ...


def relay_once(registry: Registry, producer: EventProducer, *, topic: str = TOPIC, batch: int = 100) -> int:
    """Send every pending event (oldest first), then mark them sent; returns how many."""
    sent = 0
    while events := registry.pending_events(limit=batch):
        futures = [producer.send(topic, value=json.dumps(event).encode("utf-8"), key=event["lineage"].encode("utf-8"))
                   for _, event in events]
        producer.flush()
        for future in futures:
            future.get(timeout=30)  # raises if the broker refused one: nothing is marked
        registry.mark_sent([outbox_id for outbox_id, _ in events])
        sent += len(events)
    return sent


def relay_forever(registry: Registry, producer: EventProducer, *, topic: str = TOPIC, interval: float = 1.0) -> None:
    """Relay, then wait ``interval`` seconds, until interrupted."""
    while True:
        relay_once(registry, producer, topic=topic)
        time.sleep(interval)
