"""Time steps out of the docs topic on a real broker: every record is in exactly one step, as a
document or a dead record; a step is the same whether the reader ran on or started afresh at its
offsets; documents come in event-time order; read ahead on a thread, the same steps; steps read
while a slow producer trickles the records in, partitions at different speeds, are the steps of
the finished topic."""

import json
import time

from pipeline import stream
from pipeline.kafka import Record
from pipeline.stream import ReadAhead, StepReader, topic_steps
from pipeline.config import PipelineSettings
from tests.conftest import produce, trickle
from tokmaint.cli import main


def _steps(settings, start, size, *, limit=1000):
    steps = []
    with StepReader(settings, wait=1.0) as reader:
        while len(steps) < limit:
            step = reader.read(start, size)
            if not step.documents and not step.dead:
                return steps
            steps.append(step)
            start = step.end
    return steps


def test_steps_cover_every_record_once_and_repeat_from_their_offsets(broker, drifting_corpus, capsys):
    settings = PipelineSettings(bootstrap=broker, docs_topic="docs.steps")
    assert main(["ingest", str(drifting_corpus), "--bootstrap", broker, "--topic", "docs.steps"]) == 0
    bad = [b"not json", json.dumps({"id": "x", "text": None, "ts": "2020"}).encode(), b"\xff\xfe"]
    produce(
        broker,
        "docs.steps",
        [Record(value, partition=k % 4) for k, value in enumerate(bad)] + [Record(None, key=b"deleted", partition=3)],
    )  # a tombstone

    steps = _steps(settings, {}, 64)
    docs = [d for s in steps for d in s.documents]
    assert len(docs) == 600 and len({d.id for d in docs}) == 600
    assert sorted(r.reason.split(" (")[0] for s in steps for r in s.dead) == sorted(
        ["not JSON", "'text' must be a string, got null", "not UTF-8", "no value"]
    )
    assert [d.ts for d in docs] == sorted(d.ts for d in docs)  # ingest keeps time order per partition
    assert all(len(s.documents) == 64 for s in steps[:-1])
    covered = sum(s.end[p] - (steps[k - 1].end[p] if k else 0) for k, s in enumerate(steps) for p in s.end)
    assert covered == 604  # every offset in exactly one step

    middle = steps[3]
    again = _steps(settings, steps[2].end, 64, limit=1)[0]  # a fresh reader at the same offsets
    assert again.documents == middle.documents and again.end == middle.end


class _CountingReader(StepReader):
    """A StepReader that counts its reads."""

    reads = 0

    def read(self, *args, **kwargs):
        self.reads += 1
        return super().read(*args, **kwargs)


def test_read_ahead_gives_the_steps_of_the_reader_and_records_that_came_after_an_empty_step(broker, drifting_corpus):
    settings = PipelineSettings(bootstrap=broker, docs_topic="docs.ahead")
    assert main(["ingest", str(drifting_corpus), "--bootstrap", broker, "--topic", "docs.ahead"]) == 0
    expected = _steps(settings, {}, 64)
    reader = _CountingReader(settings, wait=1.0)
    with ReadAhead(reader, size=64, depth=3) as ahead:
        start, got = {}, []
        while (step := ahead.read(start)).documents:
            got.append(step)
            start = step.end
        assert [(s.documents, s.end) for s in got] == [(s.documents, s.end) for s in expected]
        assert got[-1].lag == 0 and all(s.lag > 0 for s in got[:-1])
        assert ahead.read(start).documents == []
        reads = reader.reads
        time.sleep(0.5)  # at the topic's end the thread reads on only when asked
        assert reader.reads == reads
        produce(broker, "docs.ahead", [Record(json.dumps({"id": "late", "text": "late news", "ts": "2026"}).encode())])
        assert [d.id for d in ahead.read(start).documents] == ["late"]  # not an empty step read before
        again = ahead.read(expected[2].end)  # elsewhere: read from there
        assert again.documents == expected[3].documents


def test_records_larger_than_a_fetch_are_read_and_too_large_ones_dead_lettered(broker):
    """The reader fetches 64 KB a partition at a time; a larger record still comes whole, and
    one over ``max_record_bytes`` is a dead record with the reason."""
    settings = PipelineSettings(bootstrap=broker, docs_topic="docs.large", max_record_bytes=1 << 20)
    big = json.dumps({"id": "big", "text": "word " * 140_000, "ts": "2021"}).encode()
    too_big = json.dumps({"id": "huge", "text": "word " * 300_000, "ts": "2022"}).encode()
    produce(
        broker,
        "docs.large",
        [
            Record(value, partition=0)
            for value in (big, too_big, json.dumps({"id": "small", "text": "hi", "ts": "2023"}).encode())
        ],
    )
    steps = _steps(settings, {}, 8)
    assert [d.id for s in steps for d in s.documents] == ["big", "small"]
    assert len(steps[0].documents[0].text) == 700_000
    assert [r.reason.split(" (")[0] for s in steps for r in s.dead] == ["larger than the limit"]
    assert steps[-1].end[0] == 3


def test_a_topic_nobody_wrote_to_yet_gives_empty_steps_until_records_come(broker):
    """A job started before the first document: the broker makes the topic (as it allows)."""
    settings = PipelineSettings(bootstrap=broker, docs_topic="docs.not-yet")
    with StepReader(settings, wait=0.5) as reader:
        assert reader.partitions and reader.read({}, 8).documents == []
        produce(broker, "docs.not-yet", [Record(json.dumps({"id": "first", "text": "hello", "ts": "2024"}).encode())])
        assert [d.id for d in reader.read({}, 8).documents] == ["first"]


def test_steps_read_while_a_slow_producer_trickles_records_in_are_the_finished_topics(
    broker, drifting_corpus, monkeypatch
):
    """The reader slowed down too (a few records taken from the client at a time): what a step
    holds depends on the topic's contents alone, not on what had arrived when it was read."""
    settings = PipelineSettings(bootstrap=broker, docs_topic="docs.trickle")
    monkeypatch.setattr(stream, "POLL_RECORDS", 3)
    producer = trickle(broker, "docs.trickle", drifting_corpus)
    live, start = [], {}
    with StepReader(settings, wait=1.0) as reader:
        while (step := reader.read(start, 32)).documents or producer.is_alive():
            if step.documents:
                live.append(step)
                start = step.end
    producer.join()
    replayed = list(topic_steps(settings, 32, wait=1.0))
    assert [[d.id for d in s.documents] for s in live] == [[d.id for d in s.documents] for s in replayed]
    assert [s.end for s in live] == [s.end for s in replayed]
    assert [len(s.documents) for s in live] == [32] * 18 + [24]


def test_a_step_the_topic_went_quiet_in_is_not_complete_and_the_complete_steps_are_the_finished_topics(
    broker, drifting_corpus, monkeypatch
):
    """The producer stops for longer than the reader's wait mid-step (then goes on): the step
    read then is not ``complete`` (short, or merged on without the partition that ran dry), and
    the complete steps, each read again from the same offsets until it is, are the finished
    topic's. Its replay ends in a step that is not complete (24 documents), which a replay of the
    complete steps leaves out."""
    settings = PipelineSettings(bootstrap=broker, docs_topic="docs.stall")
    monkeypatch.setattr(stream, "POLL_RECORDS", 3)
    producer = trickle(broker, "docs.stall", drifting_corpus, stall=(10, 2.5))
    live, partial, start = [], [], {}
    with StepReader(settings, wait=1.0) as reader:
        while True:
            step = reader.read(start, 32)
            if step.complete:
                live.append(step)
                start = step.end
            elif producer.is_alive():  # the topic quiet for now: the same step again, later
                partial.append((dict(start), step))
            else:
                break
    producer.join()
    replayed = list(topic_steps(settings, 32, wait=1.0))
    assert [s.complete for s in replayed] == [True] * 18 + [False]
    complete = list(topic_steps(settings, 32, wait=1.0, complete_only=True))
    assert [[d.id for d in s.documents] for s in live] == [[d.id for d in s.documents] for s in complete]
    assert [s.end for s in live] == [s.end for s in complete] == [s.end for s in replayed[:18]]
    partitions = sorted(replayed[0].end)
    starts = [{p: 0 for p in partitions}] + [s.end for s in replayed]
    cut_elsewhere = [
        step
        for at, step in partial
        if step.documents
        and [d.id for d in step.documents]
        != [d.id for d in replayed[starts.index({p: at.get(p, 0) for p in partitions})].documents]
    ]
    assert cut_elsewhere, "the stall should have met a step mid-way"
