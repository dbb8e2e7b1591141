"""tokmaint's Kafka client, on confluent-kafka (librdkafka: ``docs/decisions/kafka-client.md``): a
producer whose every send waits until the broker has all its records, a reader of a whole topic,
and topic creation. The job's step reader (``pipeline.stream``) uses the same library.

    with Producer("127.0.0.1:9092") as producer:
        producer.send_all("docs.dlq", [Record(b"not json", key=b"docs:0:7", headers=[...])])
    read_topic("127.0.0.1:9092", "docs.dlq")   # every record, all partitions, from the start

Producers are idempotent with ``acks=all``: a record the broker took is on every replica, and a
retry of the client's never writes it twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as _Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tokenizer_service.errors import TokmaintError

_LOG = logging.getLogger("tokmaint.kafka")


@dataclass(frozen=True)
class Record:
    """One record to send: its value, key (its partition's), headers and, when chosen, partition
    and timestamp (ms since the epoch; a document's is its ``ts``: the event time a Flink job's
    windows read without decoding the record)."""

    value: bytes | None  # None: a tombstone
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    partition: int | None = None
    timestamp: int | None = None


class Producer:
    """An idempotent producer (``acks=all``) whose :meth:`send_all` returns once the broker has
    every record, or raises naming the first it refused (then nothing may count as sent)."""

    def __init__(
        self, bootstrap: str, *, max_record_bytes: int = 1 << 20, compression: str | None = None, **config: object
    ) -> None:
        """``config``: librdkafka's keys over these (``{"linger.ms": 20}`` as ``**{...}``)."""
        settings = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.max.bytes": max(max_record_bytes, 1 << 20),
            "linger.ms": 5,
            "logger": _LOG,
        }
        if compression is not None:
            settings["compression.type"] = compression
        self.bootstrap, self._producer = bootstrap, _Producer({**settings, **config})

    def deliver(
        self, topic: str, records: Iterable[Record | tuple[bytes, bytes | None]], *, timeout: float = 60.0
    ) -> list[str | None]:
        """Send ``records`` (or ``(value, key)`` pairs) to ``topic``; for each, None once the broker
        has it, or why it does not. Threads may deliver through one producer at once (the ingest
        server's requests): each waits for the reports of its own records."""
        outcomes: list[str | None] = []
        pending = [0]
        reported = threading.Condition()

        def report(k: int) -> Callable[[KafkaError | None, object], None]:
            def delivered(error: KafkaError | None, _message: object) -> None:
                with reported:
                    outcomes[k] = None if error is None else error.str()
                    pending[0] -= 1
                    reported.notify_all()

            return delivered

        for k, record in enumerate(records):
            record = record if isinstance(record, Record) else Record(*record)
            options = {} if record.partition is None else {"partition": record.partition}
            if record.timestamp is not None:
                options["timestamp"] = record.timestamp
            outcomes.append(f"not delivered within {timeout:g} s")
            with reported:
                pending[0] += 1
            while True:
                try:
                    self._producer.produce(
                        topic,
                        value=record.value,
                        key=record.key,
                        headers=record.headers,
                        on_delivery=report(k),
                        **options,
                    )
                    break
                except BufferError:  # the client's queue is full: let it send some first
                    self._producer.poll(0.1)
                except KafkaException as exc:  # refused before it left (too large, say)
                    with reported:
                        outcomes[k], pending[0] = exc.args[0].str(), pending[0] - 1
                    break
        deadline = time.monotonic() + timeout
        self._producer.flush(timeout)
        with reported:  # another thread's flush may have served some reports: wait for all of ours
            reported.wait_for(lambda: pending[0] <= 0, timeout=max(0.0, deadline - time.monotonic()))
        return outcomes

    def send_all(
        self, topic: str, records: Iterable[Record | tuple[bytes, bytes | None]], *, timeout: float = 60.0
    ) -> int:
        """Send ``records`` (or ``(value, key)`` pairs) to ``topic``; returns how many, once the
        broker has them all, or raises naming the first it did not take."""
        outcomes = self.deliver(topic, records, timeout=timeout)
        if failed := [outcome for outcome in outcomes if outcome is not None]:
            raise TokmaintError(f"Kafka at {self.bootstrap} did not take every record for {topic!r}: {failed[0]}")
        return len(outcomes)

    def close(self) -> None:
        self._producer.flush(10)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def reader(bootstrap: str, **config: object) -> Consumer:
    """A consumer of no group (its offsets are the caller's), nothing committed, librdkafka's
    ``config`` keys over these."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tokmaint-reader",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "logger": _LOG,
            **config,
        }
    )


def partitions(consumer: Consumer, topic: str, *, timeout: float = 5.0) -> list[int]:
    """``topic``'s partitions as the broker's metadata has them (none: no such topic yet, or no
    broker answered)."""
    try:
        found = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    except KafkaException:
        return []
    return [] if found is None or found.error is not None else sorted(found.partitions)


@dataclass(frozen=True)
class TopicRecord:
    """A record read back: where it stands, and what it holds."""

    partition: int
    offset: int
    value: bytes
    key: bytes | None
    headers: list[tuple[str, bytes]]


def read_topic(bootstrap: str, topic: str, *, quiet_ms: int = 3000, expected: int | None = None) -> list[TopicRecord]:
    """Every record of ``topic`` from its start, all partitions, until none comes for
    ``quiet_ms`` (or ``expected`` came): the checks of the soak, the ingest benchmark and the
    tests, of what reached the topic. A topic not there yet is waited for as long."""
    consumer = reader(bootstrap, **{"fetch.wait.max.ms": 100})
    try:
        quiet_until = time.monotonic() + quiet_ms / 1000
        while not (found := partitions(consumer, topic)) and time.monotonic() < quiet_until:
            time.sleep(0.2)
        consumer.assign([TopicPartition(topic, p, 0) for p in found])
        quiet_until = time.monotonic() + quiet_ms / 1000  # finding the partitions is not quiet
        records: list[TopicRecord] = []
        while time.monotonic() < quiet_until and (expected is None or len(records) < expected):
            for message in consumer.consume(4096, timeout=0.2):
                if message.error() is None:
                    records.append(
                        TopicRecord(
                            message.partition(),
                            message.offset(),
                            message.value(),
                            message.key(),
                            list(message.headers() or []),
                        )
                    )
                    quiet_until = time.monotonic() + quiet_ms / 1000
        return records
    finally:
        consumer.close()


def end_offsets(records: list[TopicRecord]) -> dict[int, int]:
    """Each partition's offset after the last of ``records`` (:func:`read_topic`'s, read to the
    end: the fetch's high watermark; tansu's listed end offsets are the last batch's start).

    >>> end_offsets([TopicRecord(0, 4, b"", None, []), TopicRecord(1, 0, b"", None, []),
    ...              TopicRecord(0, 2, b"", None, [])])
    {0: 5, 1: 1}
    """
    ends: dict[int, int] = {}
    for record in records:
        ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
    return ends


def create_topic(bootstrap: str, topic: str, *, partitions: int, timeout: float = 30.0) -> None:
    """Make ``topic`` with ``partitions`` partitions (one replica); one there already is no error."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _LOG})  # alive until the answer comes
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)], operation_timeout=timeout
    )[topic]
    try:
        future.result(timeout)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise TokmaintError(f"Kafka at {bootstrap} did not make topic {topic!r}: {exc.args[0].str()}") from None
