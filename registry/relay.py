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
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any, Protocol

from registry.store import Registry
from schemas.revision import REVISIONS_TOPIC


class EventProducer(Protocol):
    """What the relay needs of a Kafka producer (``pipeline.kafka.Producer`` has it): every
    ``(value, key)`` record sent, or an exception."""

    def send_all(self, topic: str, records: Iterable[tuple[bytes, bytes]]) -> int: ...


def relay_once(registry: Registry, producer: EventProducer, *, topic: str = REVISIONS_TOPIC, batch: int = 100) -> int:
    """Send every pending event (oldest first), then mark them sent; returns how many."""
    sent = 0
    while events := registry.pending_events(limit=batch):
        # Keyed by lineage: one partition keeps a lineage's events in order. Raises if the broker
        # refused one: nothing is marked, and the next round sends them again.
        producer.send_all(
            topic, [(json.dumps(event).encode("utf-8"), event["lineage"].encode("utf-8")) for _, event in events]
        )
        registry.mark_sent([outbox_id for outbox_id, _ in events])
        sent += len(events)
    return sent


def relay_forever(
    registry: Registry, producer: EventProducer, *, topic: str = REVISIONS_TOPIC, interval: float = 1.0
) -> None:
    """Relay, then wait ``interval`` seconds, until interrupted."""
    while True:
        relay_once(registry, producer, topic=topic)
        time.sleep(interval)


PARTITION_LOOK_SECONDS = 2.0  # how often RevisionEvents looks for partitions it does not read yet


class RevisionEvents:
    """A lineage's latest version number, learnt from the ``tokenizer.revisions`` topic: what a
    trainer follows instead of the registry's watch (``registry.client.LatestVersion``, whose
    interface it shares). A thread reads every partition from the start with a consumer of its
    own (no group); an event delivered again (the relay sends at least once) is recognised by
    its ``event_id`` and counted once.

        with RevisionEvents("127.0.0.1:9092", "news") as latest:
            if latest.number > mine: ...
    """

    def __init__(self, bootstrap: str, lineage: str, *, topic: str = REVISIONS_TOPIC, number: int = 0) -> None:
        """``number``: the version known already (the topic may hold none newer yet)."""
        from confluent_kafka import Consumer  # only where events are followed

        self.lineage, self.topic = lineage, topic
        self.events: list[dict[str, Any]] = []  # this lineage's events, once each, in the order read
        self.duplicates = 0  # events delivered again
        self.unreadable = 0  # records that are not revision events
        self._seen: set[str] = set()
        self._number = number
        # No group (nothing is committed), every partition from its start.
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "tokmaint-revision-events",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "fetch.wait.max.ms": 200,
                "logger": logging.getLogger("tokmaint.kafka"),
            }
        )
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._read, name="tokmaint-revision-events", daemon=True)
        self._thread.start()

    @property
    def number(self) -> int:
        """The latest version number announced (or the one known at the start)."""
        return self._number

    def _partitions(self) -> list[int]:
        try:
            found = self._consumer.list_topics(self.topic, timeout=1).topics.get(self.topic)
        except Exception:  # no broker answered yet (KafkaException)
            return []
        return [] if found is None or found.error is not None else sorted(found.partitions)

    def _read(self) -> None:
        from confluent_kafka import TopicPartition

        # The topic may come to be only with the relay's first event, and a topic being made may
        # show some of its partitions first: every partition is looked for again every few
        # seconds, and read from its start once it is seen.
        assigned: set[int] = set()
        looked = -PARTITION_LOOK_SECONDS
        while not self._stopped.is_set():
            if time.monotonic() - looked >= PARTITION_LOOK_SECONDS:
                looked = time.monotonic()
                if new := sorted(set(self._partitions()) - assigned):
                    self._consumer.incremental_assign([TopicPartition(self.topic, p, 0) for p in new])
                    assigned.update(new)
            if not assigned:
                self._stopped.wait(0.2)
                continue
            for message in self._consumer.consume(1000, timeout=0.2):
                if message.error() is None:
                    self._take(message.value())

    def _take(self, value: bytes) -> None:
        try:
            event = json.loads(value)
            lineage, event_id, version = event["lineage"], event["event_id"], int(event["version"])
        except (ValueError, TypeError, KeyError):
            self.unreadable += 1
            return
        if lineage != self.lineage:
            return
        if event_id in self._seen:
            self.duplicates += 1
            return
        self._seen.add(event_id)
        self.events.append(event)
        self._number = max(self._number, version)

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self._consumer.close()

    def __enter__(self) -> "RevisionEvents":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
