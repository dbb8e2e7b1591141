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
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as _Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tokenizer_service.errors import TokmaintError

_LOG = logging.getLogger("tokmaint.kafka")


@dataclass(frozen=True)
class Record:
    """One record to send: its value, key (its partition's), headers and, when chosen, partition."""

    value: bytes
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    partition: int | None = None


class Producer:
    """An idempotent producer (``acks=all``) whose :meth:`send_all` returns once the broker has
    every record, or raises naming the first it refused (then nothing may count as sent)."""

    def __init__(self, bootstrap: str, *, max_record_bytes: int = 1 << 20, compression: str | None = None) -> None:
        config = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.max.bytes": max(max_record_bytes, 1 << 20), "linger.ms": 5, "logger": _LOG}
        if compression is not None:
            config["compression.type"] = compression
        self.bootstrap, self._producer = bootstrap, _Producer(config)

    def send_all(self, topic: str, records: Iterable[Record | tuple[bytes, bytes | None]], *,
                 timeout: float = 60.0) -> int:
        """Send ``records`` (or ``(value, key)`` pairs) to ``topic``; returns how many, once the
        broker has them all."""
        failed: list[str] = []

        def delivered(error: KafkaError | None, _message: object) -> None:
            if error is not None:
                failed.append(error.str())

        sent = 0
        for record in records:
            record = record if isinstance(record, Record) else Record(*record)
            options = {} if record.partition is None else {"partition": record.partition}
            while True:
                try:
                    self._producer.produce(topic, value=record.value, key=record.key, headers=record.headers,
                                           on_delivery=delivered, **options)
                    break
                except BufferError:  # the client's queue is full: let it send some first
                    self._producer.poll(0.1)
                except KafkaException as exc:  # refused before it left (too large, say)
                    failed.append(exc.args[0].str())
                    break
            sent += 1
        if self._producer.flush(timeout) > 0:
            failed.append(f"not delivered within {timeout:g} s")
        if failed:
            self._producer.purge()  # what did not go is the caller's to send again, not the client's
            raise TokmaintError(f"Kafka at {self.bootstrap} did not take every record for {topic!r}: {failed[0]}")
        return sent

    def close(self) -> None:
        self._producer.flush(10)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def reader(bootstrap: str, **config: object) -> Consumer:
    """A consumer of no group (its offsets are the caller's), nothing committed, librdkafka's
    ``config`` keys over these."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "tokmaint-reader", "enable.auto.commit": False,
                     "enable.auto.offset.store": False, "logger": _LOG, **config})


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


def read_topic(bootstrap: str, topic: str, *, quiet_ms: int = 3000) -> list[TopicRecord]:
    """Every record of ``topic`` from its start, all partitions, until none comes for
    ``quiet_ms`` (the checks of the soak and the ingest benchmark: what reached the topic)."""
    consumer = reader(bootstrap, **{"fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions(consumer, topic)])
        records: list[TopicRecord] = []
        quiet_until = time.monotonic() + quiet_ms / 1000
        while time.monotonic() < quiet_until:
            for message in consumer.consume(4096, timeout=0.2):
                if message.error() is None:
                    records.append(TopicRecord(message.partition(), message.offset(), message.value(),
                                               message.key(), list(message.headers() or [])))
                    quiet_until = time.monotonic() + quiet_ms / 1000
        return records
    finally:
        consumer.close()


def create_topic(bootstrap: str, topic: str, *, partitions: int, timeout: float = 30.0) -> None:
    """Make ``topic`` with ``partitions`` partitions (one replica); one there already is no error."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _LOG})  # alive until the answer comes
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                 operation_timeout=timeout)[topic]
    try:
        future.result(timeout)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise TokmaintError(f"Kafka at {bootstrap} did not make topic {topic!r}: {exc.args[0].str()}") from None
