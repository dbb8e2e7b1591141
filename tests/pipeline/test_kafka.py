"""``pipeline.kafka`` against a real Kafka-protocol broker: every record sent is on the topic with
its key and headers once ``send_all`` returns, ``read_topic`` reads all of them back, a topic is
made once, and a record the broker cannot take is an error, never a silent loss."""

import uuid

import pytest

from pipeline.kafka import Producer, Record, create_topic, partitions, read_topic, reader
from tokenizer_service.errors import TokmaintError


def test_records_sent_are_on_the_topic_with_their_keys_and_headers(broker):
    topic = f"kafka.{uuid.uuid4().hex[:6]}"
    create_topic(broker, topic, partitions=3)
    create_topic(broker, topic, partitions=3)  # there already: no error
    consumer = reader(broker)
    try:
        assert partitions(consumer, topic) == [0, 1, 2]
    finally:
        consumer.close()
    with Producer(broker) as producer:
        records = [Record(f"v{k}".encode(), key=f"k{k}".encode(), headers=[("n", str(k).encode())]) for k in range(50)]
        sent = producer.send_all(topic, [*records, (b"pair", b"key")])
    assert sent == 51
    records = read_topic(broker, topic, quiet_ms=1000)
    assert sorted(r.value for r in records) == sorted([f"v{k}".encode() for k in range(50)] + [b"pair"])
    by_key = {r.key: r for r in records}
    assert by_key[b"k7"].headers == [("n", b"7")] and by_key[b"key"].value == b"pair"
    assert {r.partition for r in records} <= {0, 1, 2}


def test_a_record_the_broker_cannot_take_is_an_error(broker):
    with Producer(broker, max_record_bytes=1 << 20) as producer:
        with pytest.raises(TokmaintError, match="did not take every record"):
            producer.send_all(f"kafka.{uuid.uuid4().hex[:6]}", [Record(b"x" * (2 << 20))], timeout=10)
    nowhere = Producer("127.0.0.1:9")  # no broker there (and not closed: that would wait to deliver)
    with pytest.raises(TokmaintError, match="not delivered within 2 s"):
        nowhere.send_all("docs", [Record(b"x")], timeout=2)
