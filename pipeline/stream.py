"""Time steps out of the ``docs`` topic: deterministic slices from stored offsets.

A step is the next ``size`` documents in event-time order across the topic's partitions (or
those of the next window of ``seconds`` of event time: ``read(..., seconds=...)``): a merge
of the partitions' sequences that always takes the earliest head (by ``ts``, then partition), so
each step consumes a prefix of every partition. The merge takes a document only once it knows
every partition's head: a partition read to its end is waited for until it has a record, or
until the topic has not grown for ``wait`` seconds (then it has ended, for now). So a step is a
function of the topic's contents and the start offsets alone, not of when records arrived, how
fast the job or the producer is, or whether the job restarted: the step a live job reads is the
step an offline replay of the finished topic reads. Only a producer that pauses longer than
``wait`` (the end of the stream, for now) ends a step short of ``size``, or has the merge go on
without a partition: such a step is not ``complete`` (a replay of the finished topic may cut it
elsewhere), and a live job reads it again later rather than count it. Records that are no
Document, and documents dated outside the stream's event-time window (not after 1970, or more
than ``max_future_seconds`` ahead of the clock: ``schemas.document.event_time_refusal``), are
consumed where they stand, into the step's ``dead`` list, and never stop the stream.

    with StepReader(settings) as reader:
        step = reader.read(start={0: 0, 1: 0, 2: 0, 3: 0}, size=64)
        step.documents, step.end, step.dead, step.complete

``ReadAhead`` reads the steps that follow on a thread of its own, so that reading and decoding
go on while the job waits (for its counting process, for Redis); a step asked for from other
offsets than those the last one ended at starts it again from there. Once a step reaches the
end of the topic, it reads the next only when that is asked for: a step read before the ask
could miss records that came meanwhile, and would be read again.
"""

from __future__ import annotations

import heapq
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timezone

from confluent_kafka import Consumer, KafkaError, TopicPartition

from pipeline.config import PipelineSettings
from schemas.document import RecordError, StreamDocument, decode_document, event_time_refusal
from tokenizer_service.errors import TokmaintError


FILL_RECORDS = 4096  # records a partition's buffer is filled to before a merge, at most (more as it runs dry)
# Before a merge, each partition's buffer is filled to its share of the step and this much more
# (a step takes about as many records from each; one that runs dry is filled again).
FILL_MARGIN = 1.25
# The broker holds a fetch this long for data; a poll that finds nothing fetched waits twice as
# long, so that an empty fetch (a partition read to its end) costs one round trip and no more.
FETCH_WAIT_MS = 50
POLL_RECORDS = 4096  # records taken from the client's queue at once, at most
# A fetch answers this much a partition and a request, at most (a larger record still comes
# whole): the first step needs the heads of all partitions, and a fetch of whole partitions
# (megabytes) held it ~120 ms. librdkafka wants message.max.bytes no larger than a fetch.
FETCH_PARTITION_BYTES, FETCH_REQUEST_BYTES = 64 << 10, 256 << 10
# Errors of the client that it recovers from by itself (it reconnects and fetches again).
_TRANSIENT = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._PARTITION_EOF}


def _window_end(ts: datetime, seconds: float) -> datetime:
    """The end of the event-time window of ``seconds`` that holds ``ts`` (aligned to the epoch).

    >>> _window_end(datetime(2024, 1, 1, 0, 1, 30, tzinfo=timezone.utc), 60).isoformat()
    '2024-01-01T00:02:00+00:00'
    """
    return datetime.fromtimestamp((math.floor(ts.timestamp() / seconds) + 1) * seconds, tz=timezone.utc)


@dataclass(frozen=True)
class DeadRecord:
    """A record of the docs topic that is not a Document: where it stood, its bytes, the reason."""

    partition: int
    offset: int
    value: bytes
    reason: str


@dataclass
class Step:
    """One time step: its documents in merge order, the offsets it ends at (the next to read, a
    partition each) and the records it dead-lettered. ``complete``: the step is the one any
    reader of the topic from the same offsets reads, whenever (it holds ``size`` documents, or
    its window was closed by a later document, and no partition ran dry before its last
    document was taken); not so when the topic ran out or went quiet before that."""

    documents: list[StreamDocument] = field(default_factory=list)
    end: dict[int, int] = field(default_factory=dict)
    dead: list[DeadRecord] = field(default_factory=list)
    lag: int = 0  # records after ``end``, as the last fetch saw the partitions (``StepReader.lag``)
    complete: bool = True


class StepReader(AbstractContextManager["StepReader"]):
    """Reads steps of the docs topic with a consumer of its own (no group: offsets are ours)."""

    def __init__(self, settings: PipelineSettings, *, wait: float = 2.0) -> None:
        self.settings, self.wait = settings, wait
        # librdkafka fetches, decompresses and parses the records on threads of its own, outside
        # Python (kafka-python's parsing in Python took as much CPU as the job's counting). The
        # group is never joined and nothing is committed there: the offsets are ours. A topic not
        # there yet is made, where the broker allows it (a job started before the first document).
        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap,
                "group.id": "tokmaint-step-reader",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "allow.auto.create.topics": True,
                "fetch.wait.max.ms": FETCH_WAIT_MS,
                "max.partition.fetch.bytes": FETCH_PARTITION_BYTES,
                "fetch.max.bytes": FETCH_REQUEST_BYTES,
                "message.max.bytes": FETCH_REQUEST_BYTES,
                "logger": logging.getLogger("tokmaint.kafka"),
            }
        )
        deadline = time.monotonic() + 30
        while not (partitions := self._partitions()):
            if time.monotonic() > deadline:
                self.consumer.close()
                raise TokmaintError(f"no topic {settings.docs_topic!r} at {settings.bootstrap}")
            time.sleep(0.2)
        self.partitions = sorted(partitions)
        self._tps = {p: TopicPartition(settings.docs_topic, p) for p in self.partitions}
        self._buffers: dict[int, deque[tuple[int, bytes | None]]] = {p: deque() for p in self.partitions}
        self._next: dict[int, int] = {}  # the offset after the last record buffered, a partition each
        # The partitions' high watermarks as last seen, and when one last moved (the topic grew).
        self._highs: dict[int, int | None] = {}
        self._grew = time.monotonic()

    def _partitions(self) -> list[int]:
        """The docs topic's partitions, as the broker's metadata has them (none: no such topic yet)."""
        try:
            topic = self.consumer.list_topics(self.settings.docs_topic, timeout=5).topics.get(self.settings.docs_topic)
        except Exception:  # the broker not (yet) reachable: KafkaException
            return []
        return [] if topic is None or topic.error is not None else list(topic.partitions)

    def close(self) -> None:
        self.consumer.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _position(self, start: dict[int, int]) -> None:
        """Buffers that continue exactly at ``start`` (kept from the last step when they do)."""
        moved = []
        for p in self.partitions:
            begin = start.get(p, 0)
            buffer = self._buffers[p]
            while buffer and buffer[0][0] < begin:
                buffer.popleft()
            if not (buffer and buffer[0][0] == begin) and self._next.get(p) != begin:
                buffer.clear()
                self._next[p] = begin
                moved.append(p)
        if moved:
            # Assigned anew, every partition where its buffer ends: the client drops what it had
            # fetched from the earlier positions (a seek right after an assignment can fail).
            self.consumer.assign([TopicPartition(self.settings.docs_topic, p, self._next[p]) for p in self.partitions])

    def _highwater(self, p: int) -> int | None:
        """Partition p's high watermark as the last fetch saw it (None before one)."""
        high = self.consumer.get_watermark_offsets(self._tps[p], cached=True)[1]
        return high if high >= 0 else None

    def lag(self, end: dict[int, int]) -> int:
        """Records between ``end`` (the next offsets to read) and the partitions' high
        watermarks as the last fetch saw them (the fetch's watermark: tansu's ``end_offsets``
        answers the start of the last batch instead of the end)."""
        return sum(max(0, (self._highwater(p) or 0) - end.get(p, 0)) for p in self.partitions)

    def _at_end(self, p: int) -> bool:
        high = self._highwater(p)
        return high is not None and self._next[p] >= high

    def _quiet(self) -> bool:
        """True when no partition's high watermark has moved for ``wait`` seconds (the topic has
        not grown: a partition read to its end has ended, for now)."""
        for p in self.partitions:
            if (high := self._highwater(p)) != self._highs.get(p):
                self._highs[p] = high
                self._grew = time.monotonic()
        return time.monotonic() - self._grew >= self.wait

    def _await_head(self, p: int) -> None:
        """Fetch until partition p has a record buffered, or it is read to its end and the topic
        is quiet (``_quiet``). The merge takes a document only once every partition's head is
        known, so that a partition whose records came later than the others' (a producer's
        batch reaches the partitions one by one) cannot change what a step holds."""
        while not self._buffers[p]:
            if (self._at_end(p) or self._highwater(p) is None) and self._quiet():
                return
            self._poll()

    def _poll(self) -> None:
        """Buffer what the client has fetched (waiting a little for it when it has nothing)."""
        messages = self.consumer.consume(POLL_RECORDS, timeout=0)
        if not messages and (message := self.consumer.poll(2 * FETCH_WAIT_MS / 1000)) is not None:
            messages = [message]
        for message in messages:
            if (error := message.error()) is not None:
                if error.code() in _TRANSIENT or error.retriable():
                    continue
                raise TokmaintError(f"reading {self.settings.docs_topic!r} at {self.settings.bootstrap}: {error.str()}")
            p, offset = message.partition(), message.offset()
            if offset >= self._next[p]:
                self._buffers[p].append((offset, message.value()))
                self._next[p] = offset + 1

    def _fill(self, partitions: list[int], size: int, *, refresh: bool = False) -> None:
        """Fetch until each of ``partitions`` holds ``size`` records or is read to its end (as
        far as the broker has it after ``wait`` seconds). ``refresh``: when none of them has
        anything buffered, one more fetch first tells whether the topic has grown since the
        last (a live stream: the high watermarks are those of the last fetch)."""
        deadline = time.monotonic() + self.wait
        while wanting := [p for p in partitions if len(self._buffers[p]) < size]:
            if all(self._at_end(p) for p in wanting):
                # Not within a step's merge: an empty fetch waits out the poll's timeout, and a
                # partition that ran dry there was read to its end moments ago.
                if not refresh or any(self._buffers[p] for p in partitions):
                    break
                refresh = False
            elif time.monotonic() > deadline:
                break
            self._poll()

    def read(self, start: dict[int, int], size: int, *, seconds: float | None = None) -> Step:
        """The step of ``size`` documents that begins at ``start`` (partition → next offset);
        with ``seconds``, the documents of one window of that many seconds of event time (the
        first document's; windows aligned to the epoch, as Beam's ``FixedWindows``), at most
        ``size`` of them (a fuller window goes on in the next step). The step is ``complete``
        when it holds ``size`` documents or a later document closed its window, every document
        taken while every partition's head was known: a partition that ran dry (the topic quiet
        for ``wait``) could still get a record that belongs before the step's next document."""
        self._position(start)
        now = datetime.now(timezone.utc)  # the event-time window's clock, once a step
        share = math.ceil(FILL_MARGIN * size / len(self.partitions))
        self._fill(self.partitions, min(size, share, FILL_RECORDS), refresh=True)
        step = Step(end={p: start.get(p, 0) for p in self.partitions})
        heads: list[tuple] = []
        window_end: datetime | None = None
        dry = False  # a partition ran dry: the merge went on without its head

        def advance(p: int) -> None:
            """Consume partition p's dead records at its head, then queue its next document."""
            buffer = self._buffers[p]
            while True:
                if not buffer:  # read on: a merge that skipped a partition with more would not repeat
                    self._await_head(p)
                    if not buffer:
                        nonlocal dry
                        dry = True
                        return
                offset, value = buffer[0]
                try:
                    if value is None:
                        raise RecordError("no value (a tombstone)")
                    doc = decode_document(value, max_bytes=self.settings.max_record_bytes)
                    # Dated ahead, it would hold its partition's head until every later document is read.
                    if reason := event_time_refusal(
                        doc.ts, now=now, max_future_seconds=self.settings.max_future_seconds
                    ):
                        raise RecordError(reason)
                except RecordError as exc:
                    step.dead.append(DeadRecord(p, offset, value or b"", str(exc)))
                    step.end[p] = offset + 1
                    buffer.popleft()
                    continue
                heapq.heappush(heads, (doc.ts, p, offset, doc))
                return

        for p in self.partitions:
            advance(p)
        exact, closed = True, False  # every document taken with every head known; the window closed
        while heads and len(step.documents) < size:
            if seconds is not None:
                if window_end is None:
                    window_end = _window_end(heads[0][0], seconds)
                elif heads[0][0] >= window_end:
                    closed = True
                    break
            exact = exact and not dry
            _, p, offset, doc = heapq.heappop(heads)
            self._buffers[p].popleft()
            step.documents.append(doc)
            step.end[p] = offset + 1
            advance(p)
        step.lag = self.lag(step.end)
        # The last document's partition running dry after it changes no document of the step.
        step.complete = exact and (len(step.documents) == size or (closed and not dry))
        return step


class ReadAhead:
    """The steps of a ``StepReader`` (which it owns from then on), read ``depth`` steps ahead
    on a thread of its own: ``read(start)`` gives the same step as ``reader.read(start, size,
    seconds=seconds)``, at once when it was read already.

    >>> class Counting:  # a reader of steps of ``size`` documents from offsets {0: k}
    ...     def read(self, start, size, *, seconds=None):
    ...         return Step(documents=[...] * size, end={0: start.get(0, 0) + size})
    ...     def close(self): pass
    >>> ahead = ReadAhead(Counting(), size=2)
    >>> ahead.read({0: 0}).end, ahead.read({0: 2}).end, ahead.read({0: 10}).end
    ({0: 2}, {0: 4}, {0: 12})
    >>> ahead.close()
    """

    def __init__(self, reader: StepReader, *, size: int, seconds: float | None = None, depth: int = 2) -> None:
        self.reader, self.size, self.seconds, self.depth = reader, size, seconds, depth
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._asked = threading.Condition()
        self._asks = 0  # steps asked for (taken from the queue or waited for) since the thread started
        self._steps: queue.Queue = queue.Queue(maxsize=depth)
        self._next: dict[int, int] | None = None  # where the next step the thread gives begins

    def read(self, start: dict[int, int]) -> Step:
        """The step that begins at ``start`` (partition → next offset). A step with nothing in
        it, or not ``complete``, says the topic had nothing more when it was read: one read
        before this call is dropped for a fresh one from ``start`` (records may have come since)."""
        asked = time.monotonic()
        if self._thread is None or start != self._next:
            self._restart(start)
        while True:
            with self._asked:
                self._asks += 1
                self._asked.notify()
            item = self._steps.get()
            if isinstance(item, BaseException):
                self._thread = None  # ended: the next read starts it again
                raise item
            read_at, step = item
            if read_at >= asked or step.complete or (step.dead and not step.documents):
                self._next = step.end
                return step
            if step.documents:  # a partial step read ahead: again from its start (the thread read on)
                self._restart(start)

    def _restart(self, start: dict[int, int]) -> None:
        self._halt()
        self._stop.clear()
        self._next, self._asks = dict(start), 0
        self._thread = threading.Thread(target=self._run, args=(dict(start),), name="tokmaint-read-ahead", daemon=True)
        self._thread.start()

    def _run(self, start: dict[int, int]) -> None:
        try:
            put = 0
            while self._put((time.monotonic(), step := self.reader.read(start, self.size, seconds=self.seconds))):
                start, put = step.end, put + 1
                # At the topic's end (a step not complete is, or was for a while): read on when asked.
                if (step.lag == 0 or not step.complete) and not self._asked_beyond(put):
                    return
        except BaseException as exc:  # the reader's error is the job's, at its next read
            self._put(exc)

    def _asked_beyond(self, put: int) -> bool:
        """Wait until more than ``put`` steps were asked for; False when told to stop meanwhile."""
        with self._asked:
            while self._asks <= put:
                if self._stop.is_set():
                    return False
                self._asked.wait(timeout=0.1)
        return True

    def _put(self, item: tuple[float, Step] | BaseException) -> bool:
        """Queue ``item`` once there is room; False when told to stop meanwhile."""
        while not self._stop.is_set():
            try:
                self._steps.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _halt(self) -> None:
        """Stop the thread and drop the steps it read ahead."""
        if self._thread is None:
            return
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._steps.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread = None
        self._steps = queue.Queue(maxsize=self.depth)

    def close(self) -> None:
        self._halt()
        self.reader.close()

    def __enter__(self) -> "ReadAhead":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def topic_steps(
    settings: PipelineSettings,
    size: int,
    *,
    seconds: float | None = None,
    wait: float = 2.0,
    complete_only: bool = False,
) -> Iterator[Step]:
    """The docs topic's steps from its start, read to its end (until the topic has been quiet for
    ``wait`` seconds): the offline replay a live job's steps equal, whenever it read them.
    ``complete_only``: up to the first step with documents that is not ``complete`` (what a live
    job counts, one not told that the topic ended: it leaves that step for more documents)."""
    with StepReader(settings, wait=wait) as reader:
        position: dict[int, int] = {}
        while (read := reader.read(position, size, seconds=seconds)).documents or read.dead:
            if complete_only and read.documents and not read.complete:
                return
            yield read
            position = read.end


def topic_texts(settings: PipelineSettings, *, wait: float = 2.0, step: int = 1000) -> list[str]:
    """Every document's text on the docs topic, in the pipeline's step order, read to its end
    (what ``tokmaint stats hypertokens`` reads; records that are not Documents are passed over)."""
    return [d.text for read in topic_steps(settings, step, wait=wait) for d in read.documents]
