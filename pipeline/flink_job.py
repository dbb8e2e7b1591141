"""The scale-out job: the docs topic into a lineage's statistics on a Flink cluster (PyFlink).

What runs where:

* **Flink's Kafka source** (Java, the SQL connector's table: ``_source_table``) reads the topic's
  partitions in parallel; a record's event time is its Kafka timestamp, which tokmaint's producers
  set to the document's ``ts`` (``Record.timestamp``), so each partition's watermark is made in
  Java without decoding. A timestamp outside the stream's event-time window (not after 1970, or
  more than ``max_future_seconds`` ahead of the clock) becomes the epoch there, which moves no
  watermark: a record dated 2099 cannot make the documents after it late.
* **Decoding** (Python, parallel): a record that is not a Document goes to the dead-letter topic
  with the reason ``pipeline run`` gives it; so do a document dated outside the window, one whose
  timestamp is not its ``ts`` (it would land in another window than its ``ts`` says) and one later
  than ``max_lateness_seconds`` behind its partition's watermark (its window was written).
* **Windows** of ``step_seconds`` of event time, aligned to the epoch, are the steps, as
  ``pipeline run --step-seconds`` makes them. Documents are sharded by id, so a producer's
  resend meets its first copy and is dropped, and the shards are keyed so that they fall on the
  counting subtasks evenly (``shard_keys``). Each shard keeps its documents in Flink's keyed
  state until the watermark passes their window's end; then they are counted in one Python call
  (``Count``: ``StepCounter.count_texts``, neighbours included, ``pipeline run``'s numbers
  exactly) with the version the statistics count with when the window comes, read from Redis
  (``RedisStatsStore.counted_version``). A document so crosses from Java into Python twice:
  decoded, then counted (Flink SQL's windows had it made into JSON and decoded again, and
  their generated code took 5-6 s of each start to compile).
* **One writer** (parallelism 1) adds a window's parts (``add_counts``) once the watermark has
  passed it, counting again only a part counted with a version it has replaced since (the
  windows the counting stage ran ahead with while a revision was made: from the tally of its
  words, ``StepCounter.count_tally``), and writes the step with
  ``LineageStatistics``: the same atomic write and revision commit the local job uses. A window
  ending no later than the last one written is a replay after a restore, skipped: a TaskManager
  killed mid-run, or a stop with a savepoint and a start from it, changes nothing.

Every Python function runs in PyFlink's thread mode (``execution_mode``): inside the
TaskManager's JVM, no worker process, no bundles, a watermark passed on at once. A TaskManager's
slots share its interpreter, so the clusters tokmaint starts give each TaskManager one slot.

Submitted by ``tokmaint pipeline flink LINEAGE --flink-master HOST:PORT --step-seconds S`` (with
``pipeline run``'s options), which calls :func:`submit`: ``flink run`` of this module, the
settings as one JSON argument::

    job_id = submit(FlinkJobSpec(lineage="git", registry=url, pipeline=settings, stream=stream, step_seconds=3600),
                    master="127.0.0.1:8081")
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from pipeline.config import PipelineSettings
from tokenizer_service.counting import StepCounter, StepCounts, WordTally
from tokenizer_service.evolve import StreamSettings

WINDOW = -1  # the "partition" under which the statistics keep a step's position: its window's end (ms)
# A window is whole milliseconds, and its end stays far inside a Flink timestamp (int64 ms).
MIN_STEP_SECONDS, MAX_STEP_SECONDS = 0.001, 1e9
# Key groups, fixed: keyed state is kept by key group, so a savepoint restores at any parallelism
# up to this, and the shards' keys (shard_keys) are chosen for its groups.
MAX_PARALLELISM = 128
WINDOW_LISTS = 8  # the lists a keyed function keeps its pending windows' items in (WindowLists)
ENDED = ("FINISHED", "FAILED", "CANCELED")  # a job's states it does not leave
# What Flink says of a savepoint asked for while the job fails over (a TaskManager died): asked again.
RESTORING = (
    "Not all required tasks are currently running",
    "Checkpoint Coordinator is suspending",
    "Trigger checkpoint failure",
    "is restarting",
)
OUTSIDE_WINDOW = 0  # the event time (ms) the source gives a record whose timestamp is outside the window


class FlinkJobSpec(BaseModel):
    """Everything the job needs, passed to it as one JSON argument (no option parser of its own:
    the command that submits it has parsed the options into these settings)."""

    lineage: str
    registry: str
    pipeline: PipelineSettings
    stream: StreamSettings
    step_seconds: float = Field(ge=MIN_STEP_SECONDS, le=MAX_STEP_SECONDS)
    max_lateness_seconds: float = Field(60.0, ge=0)
    shards: int = Field(4, ge=1)  # keys a window's documents are tallied under (>= the parallelism)
    parallelism: int | None = Field(2, ge=1)  # None: the cluster's (parallelism.default)
    checkpoint_ms: int = Field(2000, ge=100)
    # PyFlink's thread mode runs the Python functions inside the TaskManagers' JVMs (PEMJA): no
    # worker processes, no bundles, a watermark passed on at once. Process mode is the fallback.
    execution_mode: Literal["thread", "process"] = "thread"
    # Explicit end offsets (partition -> offset): the job stops there (a benchmark, a test).
    # None: it runs until cancelled.
    bounded: dict[int, int] | None = None


def shard_of(doc_id: str, shards: int) -> int:
    """The shard a document's copies all go to (stable across processes, unlike ``hash``).

    >>> shard_of("doc-1", 4) == shard_of("doc-1", 4), 0 <= shard_of("x", 4) < 4
    (True, True)
    """
    return zlib.crc32(doc_id.encode("utf-8")) % shards


def _int32(x: int) -> int:
    """``x`` wrapped to a Java ``int``, as Java's arithmetic overflows.

    >>> _int32(2**31), _int32(-(2**31) - 1), _int32(7)
    (-2147483648, 2147483647, 7)
    """
    return (x + 2**31) % 2**32 - 2**31


def _rotl32(x: int, r: int) -> int:
    """Java's ``Integer.rotateLeft(x, r)``.

    >>> _rotl32(1, 31), _rotl32(-2147483648, 1)
    (-2147483648, 1)
    """
    x &= 0xFFFFFFFF
    return _int32((x << r) | (x >> (32 - r)))


def key_group(key: int, max_parallelism: int = MAX_PARALLELISM) -> int:
    """The key group Flink keeps an INT key of ``key_by(..., Types.INT())`` in: PyFlink keys by a
    one-field ``Row``, whose hash is ``62 + key``; ``MathUtils.murmurHash`` of that, modulo the
    key groups (``KeyGroupRangeAssignment``). Subtask ``i`` of ``p`` holds the groups ``g`` with
    ``g * p // max_parallelism == i``.

    >>> [key_group(k) for k in range(4)]
    [33, 44, 97, 104]
    """
    code = _int32(_int32(62 + key) * -862048943)
    code = _int32(_rotl32(code, 15) * 461845907)
    code = _int32(_rotl32(code, 13) * 5 - 430675100) ^ 4
    for shift, factor in ((16, -2048144789), (13, -1028477387), (16, None)):  # bitMix
        code ^= (code & 0xFFFFFFFF) >> shift
        code = _int32(code * factor) if factor else _int32(code)
    code = abs(code) if code != -(2**31) else 0
    return code % max_parallelism


def shard_keys(shards: int, max_parallelism: int = MAX_PARALLELISM) -> list[int]:
    """The key each shard is keyed by: the least whose key group (:func:`key_group`) is the middle
    of the shard's share of the groups, so that a parallelism dividing ``shards`` gives every
    subtask as many shards (hashing the shards' numbers gave one of two subtasks 80% of the
    documents). The keys depend on ``shards`` only, not on the parallelism: a resend after a
    rescale meets its first copy.

    >>> keys = shard_keys(4)
    >>> [key_group(k) * 2 // MAX_PARALLELISM for k in keys], [key_group(k) * 4 // MAX_PARALLELISM for k in keys]
    ([0, 0, 1, 1], [0, 1, 2, 3])
    """
    wanted = {(2 * shard + 1) * max_parallelism // (2 * shards): shard for shard in range(shards)}
    keys: dict[int, int] = {}
    key = 0
    while len(keys) < len(wanted):
        if (shard := wanted.get(key_group(key, max_parallelism))) is not None:
            keys.setdefault(shard, key)
        key += 1
    return [keys[shard] for shard in range(shards)]


@dataclass(frozen=True)
class WindowPart:
    """One shard's part of a window, as the counting stage hands it to the writer: its counts with
    ``version`` (``count_texts``, neighbours too) and the tally of its words they came from
    (``StepCounter.tally_texts``), which the writer counts again only when it holds another version
    by then (a revision it made meanwhile): four times as fast as counting the texts again."""

    end: int  # the window's end (ms): the step's position
    version: int
    counts: StepCounts
    tally: WordTally
    ids: list[str]
    resent: int  # copies dropped: a producer's resends


class WindowLists:
    """Items kept in a keyed function's Flink state by the window they belong to, in one of
    ``WINDOW_LISTS`` lists by the window's number, so that taking a window's items reads only its
    own list (one list for all read and rewrote the later windows' items at each window: 40% of
    the counting stage's time). Made in a function's ``open``:

        self.docs = WindowLists(runtime_context, "docs", step_ms=60_000)
        self.docs.add(end, ("doc-1", "text"))   # end: the window's end (ms)
        self.docs.take(end)                      # [("doc-1", "text")], gone from the state
    """

    def __init__(self, runtime_context: Any, name: str, *, step_ms: int) -> None:
        from pyflink.common import Types
        from pyflink.datastream.state import ListStateDescriptor

        self.step_ms = step_ms
        self.lists = [
            runtime_context.get_list_state(ListStateDescriptor(f"{name}-{n}", Types.PICKLED_BYTE_ARRAY()))
            for n in range(WINDOW_LISTS)
        ]

    def add(self, end: int, item: Any) -> None:
        """Keep ``item`` with the window that ends at ``end``."""
        self.lists[end // self.step_ms % WINDOW_LISTS].add((end, item))

    def take(self, end: int) -> list[Any]:
        """The items of the window ending at ``end``, in the order they came, removed from the
        state; a window as many lists later, pending already (a watermark held back that long),
        keeps its own."""
        kept = self.lists[end // self.step_ms % WINDOW_LISTS]
        taken, others = [], []
        for entry in kept.get():
            if entry[0] == end:
                taken.append(entry[1])
            else:
                others.append(entry)
        if others:
            kept.update(others)
        else:
            kept.clear()
        return taken


class VersionedCounter:
    """A :class:`~tokenizer_service.counting.StepCounter` at the version asked for, moved to
    another (its word encodings kept where the change allows) when asked for that one.

        counted = VersionedCounter(RegistryClient(url), "git")
        version, counter = counted.at(3)   # None: the registry's latest
    """

    def __init__(self, registry: Any, lineage: str) -> None:
        self.registry, self.lineage = registry, lineage
        self.version: int | None = None
        self.counter: StepCounter | None = None

    def at(self, version: int | None) -> tuple[int, StepCounter]:
        """The counter at ``version`` (the registry's latest when None: the statistics have none
        yet, and the writer claims the latest)."""
        if version is None:
            version = self.registry.version(self.lineage).number
        if version != self.version or self.counter is None:
            tokenizer = self.registry.tokenizer(self.lineage, version)
            if self.counter is None:
                self.counter = StepCounter(tokenizer)
            else:
                self.counter.set_tokenizer(tokenizer)
            self.version = version
        return version, self.counter


def running_mode() -> str:
    """How this Python function runs: ``thread`` inside the TaskManager's JVM (PyFlink's thread
    mode, PEMJA), ``process`` in a Python worker of its own. Read off the process, not the
    configuration: Flink falls back to process mode where thread mode cannot run a function.

    >>> running_mode()  # a test's Python process
    'process'
    """
    try:
        exe = os.readlink("/proc/self/exe")
    except OSError:
        return "process"
    return "thread" if Path(exe).name == "java" else "process"


def report_shards(subtask: str, keys: list[int]) -> None:
    """Say, in the TaskManager's output, which shards' keys a counting subtask (``subtask``: a
    name of its own for each start, PyFlink 2.3's thread mode cannot give it its index) has
    counted so far: the benchmark reads back how the shards fell on the subtasks."""
    print(json.dumps({"counting_subtask": subtask, "shard_keys": keys}), flush=True)


def report_mode(operator: str) -> None:
    """Say, in the TaskManager's output, how a subtask of ``operator`` runs (``running_mode``): the
    benchmark reads it back as ``execution_mode``."""
    print(
        json.dumps({"operator": operator, "execution_mode": running_mode(), "pid": os.getpid(), "at": time.time()}),
        flush=True,
    )


class DeadLetters:
    """Records for the dead-letter topic, sent as they come (they are rare), keyed by their
    content's hash: a replay after a restore sends the same keys again (at least once)."""

    def __init__(self, settings: PipelineSettings) -> None:
        from pipeline.kafka import Producer

        self.settings = settings
        self.producer = Producer(settings.bootstrap, max_record_bytes=2 * settings.max_record_bytes)

    def send(self, value: bytes, reason: str) -> None:
        import hashlib

        from pipeline.kafka import Record
        from pipeline.topics import dead_letter

        value, headers = dead_letter(
            value, reason, limit=self.settings.max_record_bytes, source=f"{self.settings.docs_topic} (flink)"
        )
        key = f"{self.settings.docs_topic}:sha256:{hashlib.sha256(value).hexdigest()}".encode()
        self.producer.send_all(self.settings.dlq_topic, [Record(value, key=key, headers=headers)])

    def close(self) -> None:
        self.producer.close()


def build(env: Any, spec: FlinkJobSpec) -> None:
    """Add the job to a PyFlink ``StreamExecutionEnvironment``."""
    from pyflink.common import Row, Types
    from pyflink.datastream.functions import KeyedProcessFunction, ProcessFunction
    from pyflink.table import StreamTableEnvironment

    settings = spec.pipeline
    step_ms = round(spec.step_seconds * 1000)
    keys = shard_keys(spec.shards)
    tables = StreamTableEnvironment.create(env)
    tables.execute_sql(_source_table(spec))
    records = tables.to_data_stream(tables.sql_query("SELECT `value`, rowtime FROM records"))

    class Decode(ProcessFunction):
        def open(self, runtime_context: Any) -> None:
            self.dead = DeadLetters(settings)
            report_mode("decode")

        def close(self) -> None:
            self.dead.close()

        def process_element(self, row: Any, ctx: ProcessFunction.Context) -> Iterable[Any]:
            from datetime import datetime, timezone

            from schemas.document import RecordError, decode_document, event_time_refusal

            value = bytes(row[0])
            try:
                doc = decode_document(value, max_bytes=settings.max_record_bytes)
            except RecordError as exc:
                self.dead.send(value, str(exc))
                return
            # The source's clock read this record's timestamp first: anything it took, this takes.
            now = datetime.now(timezone.utc)
            if reason := event_time_refusal(doc.ts, now=now, max_future_seconds=settings.max_future_seconds):
                self.dead.send(value, reason)
                return
            at = ctx.timestamp()  # a call into the JVM: once
            if at == OUTSIDE_WINDOW:  # the source saw a timestamp outside the window
                self.dead.send(
                    value,
                    f"its record's timestamp is outside the event-time window (not after 1970, or more than "
                    f"{settings.max_future_seconds:,g} s ahead of the clock), not its ts ({doc.ts_ms} ms): "
                    "the producer must set it (tokmaint ingest does)",
                )
                return
            if doc.ts_ms != at:
                self.dead.send(
                    value,
                    f"its record's timestamp ({at}) is not its ts ({doc.ts_ms} ms): "
                    "the producer must set it (tokmaint ingest does)",
                )
                return
            end = (at // step_ms + 1) * step_ms
            # Its window closed here already: the windows downstream may have been written without it.
            if end - 1 <= ctx.timer_service().current_watermark():
                self.dead.send(
                    value,
                    f"late: more than {spec.max_lateness_seconds:g} s behind its partition's "
                    "event time, after its window was written",
                )
                return
            # The text as UTF-8: bytes cross into the JVM, the shuffle and the state as they are,
            # where a str is transcoded at each crossing and written a character at a time.
            yield Row(keys[shard_of(doc.id, spec.shards)], end, doc.id, doc.text.encode("utf-8"))

    class Count(KeyedProcessFunction):
        """A shard's documents, kept in its keyed state by window until the watermark passes the
        window's end, then resends dropped and counted in one call with the version the
        statistics count with as the window comes (read from Redis): the writer counts again
        only a part counted with a version it has replaced since."""

        def open(self, runtime_context: Any) -> None:
            from pipeline.parts import connect_redis
            from registry.client import RegistryClient

            self.docs = WindowLists(runtime_context, "docs", step_ms=step_ms)
            self.registry = RegistryClient(spec.registry)
            self.redis = connect_redis(settings.redis)
            self.counted = VersionedCounter(self.registry, spec.lineage)
            self.shards: set[int] = set()
            self.subtask = os.urandom(4).hex()
            report_mode("count")

        def close(self) -> None:
            self.registry.close()
            self.redis.close()

        def process_element(self, row: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any]:
            self.docs.add(row[1], (row[2], row[3]))
            ctx.timer_service().register_event_time_timer(row[1] - 1)  # the window's last millisecond
            return ()

        def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterable[Any]:
            from pipeline.redis_store import RedisStatsStore

            end = timestamp + 1
            texts: dict[str, str] = {}
            copies = 0
            for doc_id, text in self.docs.take(end):
                if doc_id not in texts:
                    texts[doc_id] = text.decode("utf-8")
                copies += 1
            if (shard := ctx.get_current_key()) not in self.shards:
                self.shards.add(shard)
                report_shards(self.subtask, sorted(self.shards))
            if not texts:
                return
            version, counter = self.counted.at(RedisStatsStore.counted_version(self.redis, lineage=spec.lineage))
            counts, tally = counter.tally_texts(list(texts.values()))
            yield WindowPart(
                end=end,
                version=version,
                counts=counts,
                tally=tally,
                ids=list(texts),
                resent=copies - len(texts),
            )

    class WriteSteps(KeyedProcessFunction):
        """The windows' parts, added and written as steps in event-time order once the
        watermark has passed them."""

        def open(self, runtime_context: Any) -> None:
            from pipeline.lineage_statistics import LineageStatistics
            from pipeline.parts import connect_redis
            from registry.client import RegistryClient

            self.pending = WindowLists(runtime_context, "parts", step_ms=step_ms)
            self.registry = RegistryClient(spec.registry)
            self.stats = LineageStatistics(
                stream=spec.stream,
                redis_client=connect_redis(settings.redis),
                registry=self.registry,
                lineage=spec.lineage,
            )
            self.stats.resume()
            self.run = os.urandom(4).hex()  # this start's: a restore or a resume is another
            report_mode("write steps")

        def close(self) -> None:
            self.stats.close()
            self.registry.close()

        def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any]:
            self.pending.add(value.end, value)
            ctx.timer_service().register_event_time_timer(value.end - 1)  # the window's last millisecond
            return ()

        def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterable[Any]:
            # A window's timer: the timers of one key fire in the order of their times, so the
            # windows are written in event-time order.
            end = timestamp + 1
            if parts := self.pending.take(end):
                began = time.perf_counter()
                if (written := self.write(end, parts)) is not None:
                    yield json.dumps(
                        {
                            "window_end_ms": end,
                            "resent": sum(p.resent for p in parts),
                            "parts": len(parts),
                            **written,
                            "step": self.stats.store.step,
                            "run": self.run,
                            "version": self.stats.tedtok.version,
                            "seconds": time.perf_counter() - began,
                            "at": time.time(),
                        }
                    )

        def write(self, end: int, parts: list[WindowPart]) -> dict[str, Any] | None:
            """Write the window's step from its parts; its documents and what it took: the parts counted again here
            (their version replaced meanwhile) and the seconds of that, of adding the parts and
            of the write with its revision. None when it was written already (a replay after a
            restore)."""
            from tokenizer_service.counting import add_counts

            stats = self.stats
            if stats.store.meta()["offsets"].get(WINDOW, -1) >= end:  # a replay after a restore: written already
                return None
            if stats.outdated():
                stats.follow()
            began = time.perf_counter()
            counts, recounted = [], 0
            for part in parts:
                if part.version == stats.tedtok.version:
                    counts.append(part.counts)
                else:  # counted before the revision the writer has made since (or one it followed)
                    counts.append(stats.tedtok.counter.count_tally(part.tally))
                    recounted += 1
            counted = time.perf_counter()
            step = add_counts(counts)
            added = time.perf_counter()
            documents = sum(len(p.ids) for p in parts)
            revised = stats.observe(
                step,
                offsets={WINDOW: end},
                ids=sorted(i for p in parts for i in p.ids),
                documents=documents,
                keep_ids_steps=settings.dedupe_steps or None,
            )
            return {
                "documents": documents,
                "recounted": recounted,
                "revised": revised,
                "recount_seconds": counted - began,
                "add_seconds": added - counted,
                "observe_seconds": time.perf_counter() - added,
            }

    # Named and with uids of their own: a savepoint's state finds its operator in a newer job.
    docs = (
        records.process(
            Decode(), Types.ROW([Types.INT(), Types.LONG(), Types.STRING(), Types.PRIMITIVE_ARRAY(Types.BYTE())])
        )
        .name("decode")
        .uid("decode")
    )
    parts = (
        docs.key_by(lambda row: row[0], Types.INT())
        .process(Count(), Types.PICKLED_BYTE_ARRAY())
        .name("count")
        .uid("count")
    )
    (
        parts.key_by(lambda _: 0, Types.INT())
        .process(WriteSteps(), Types.STRING())
        .set_parallelism(1)
        .name("write steps")
        .uid("write steps")
        .print()
    )


def _source_table(spec: FlinkJobSpec) -> str:
    """The docs topic as a Flink SQL table (the Kafka connector's): each record's value and its
    event time, ``rowtime``, with per-partition watermarks made in the source. ``rowtime`` is the
    record's Kafka timestamp inside the stream's event-time window (after the epoch, at most
    ``max_future_seconds`` ahead of the clock), and the epoch (``OUTSIDE_WINDOW``) outside it:
    a record dated 2099 so moves no partition's event time (the watermark only goes forward),
    and ``Decode`` dead-letters it.

    >>> spec = FlinkJobSpec(lineage="git", registry="http://r", pipeline=PipelineSettings(), stream=StreamSettings(),
    ...                     step_seconds=60, bounded={0: 5, 1: 7})
    >>> print(_source_table(spec))  # doctest: +ELLIPSIS
    CREATE TEMPORARY TABLE records (...
      rowtime AS CASE WHEN kafka_ts > TO_TIMESTAMP_LTZ(0, 3) AND kafka_ts <= TIMESTAMPADD(MILLISECOND, 86400000, \
CURRENT_TIMESTAMP) THEN kafka_ts ELSE TO_TIMESTAMP_LTZ(0, 3) END,
      WATERMARK FOR rowtime AS TIMESTAMPADD(MILLISECOND, -60000, rowtime)
    ) WITH (...'scan.bounded.specific-offsets' = 'partition:0,offset:5;partition:1,offset:7')
    """
    settings = spec.pipeline
    options = {
        "connector": "kafka",
        "topic": settings.docs_topic,
        "properties.bootstrap.servers": settings.bootstrap,
        "properties.group.id": f"tokmaint-flink-{spec.lineage}",  # its offsets, committed at checkpoints: drain
        "scan.startup.mode": "earliest-offset",
        "scan.topic-partition-discovery.interval": "10 s",
        "value.format": "raw",
    }
    if spec.bounded is not None:
        options["scan.bounded.mode"] = "specific-offsets"
        options["scan.bounded.specific-offsets"] = ";".join(
            f"partition:{p},offset:{end}" for p, end in sorted(spec.bounded.items())
        )
    future_ms = round(settings.max_future_seconds * 1000)
    lateness_ms = round(spec.max_lateness_seconds * 1000)
    # Flink SQL's intervals of more than 99 seconds are refused in a watermark: TIMESTAMPADD instead.
    return (
        "CREATE TEMPORARY TABLE records (\n"
        "  `value` BYTES,\n"
        "  kafka_ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL,\n"
        f"  rowtime AS CASE WHEN kafka_ts > TO_TIMESTAMP_LTZ({OUTSIDE_WINDOW}, 3) AND kafka_ts <= "
        f"TIMESTAMPADD(MILLISECOND, {future_ms}, CURRENT_TIMESTAMP) THEN kafka_ts "
        f"ELSE TO_TIMESTAMP_LTZ({OUTSIDE_WINDOW}, 3) END,\n"
        f"  WATERMARK FOR rowtime AS TIMESTAMPADD(MILLISECOND, {-lateness_ms}, rowtime)\n"
        ") WITH (" + ", ".join(f"'{k}' = '{v}'" for k, v in options.items()) + ")"
    )


def spec_from_env() -> FlinkJobSpec:
    """The job's spec from tokmaint's environment variables, for a job whose program runs on the
    cluster (the Kubernetes operator's application mode, ``FlinkDeployment.spec.job``, which
    restarts it from a savepoint on each upgrade): ``TOKMAINT_LINEAGE``, ``TOKMAINT_REGISTRY_URL``,
    the ``TOKMAINT_PIPELINE_*`` settings (``TOKMAINT_PIPELINE_STEP_SECONDS`` required), the
    ``TOKMAINT_STREAM_*`` ones, ``TOKMAINT_FLINK_MAX_LATENESS_SECONDS`` (60) and
    ``TOKMAINT_FLINK_EXECUTION_MODE`` (``thread``). The parallelism is
    the cluster's (the operator's ``spec.job.parallelism``)."""
    from registry.config import RegistryClientSettings
    from tokenizer_service.errors import TokmaintError

    settings, lineage, registry = PipelineSettings(), os.environ.get("TOKMAINT_LINEAGE"), RegistryClientSettings().url
    missing = [
        name
        for name, value in (
            ("TOKMAINT_LINEAGE", lineage),
            ("TOKMAINT_REGISTRY_URL", registry),
            ("TOKMAINT_PIPELINE_STEP_SECONDS", settings.step_seconds),
        )
        if not value
    ]
    if missing:
        raise TokmaintError(f"the Flink job's spec from the environment needs {', '.join(missing)}")
    return FlinkJobSpec(
        lineage=lineage,
        registry=registry,
        pipeline=settings,
        stream=StreamSettings(),
        step_seconds=settings.step_seconds,
        max_lateness_seconds=float(os.environ.get("TOKMAINT_FLINK_MAX_LATENESS_SECONDS", 60)),
        parallelism=None,
        execution_mode=os.environ.get("TOKMAINT_FLINK_EXECUTION_MODE", "thread"),
    )


def main(argv: list[str]) -> None:
    """The program ``flink run -py`` runs: the spec (JSON, or ``--from-env``: :func:`spec_from_env`),
    then the job."""
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    from pipeline.flink_cluster import runner_jars
    from pipeline.flink_jars import connector_jars

    spec = spec_from_env() if argv == ["--from-env"] else FlinkJobSpec.model_validate_json(argv[0])
    conf = Configuration()
    conf.set_string("python.execution-mode", spec.execution_mode)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    # pipeline.jars replaces the Python runner's jar unless it is listed too.
    jars = [*connector_jars(), *runner_jars()]
    env.add_jars(*[jar.as_uri() for jar in jars])
    env.set_max_parallelism(MAX_PARALLELISM)
    if spec.parallelism is not None:
        env.set_parallelism(spec.parallelism)
    env.enable_checkpointing(spec.checkpoint_ms)
    build(env, spec)
    env.execute(f"tokmaint-{spec.lineage}")


def submit(
    spec: FlinkJobSpec,
    *,
    master: str,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    savepoint: str | None = None,
) -> str:
    """Submit the job to the cluster whose REST address is ``master`` (``HOST:PORT``) with Flink's
    command-line client, detached; its job id. ``env``: the client's environment (a
    :class:`~pipeline.flink_cluster.FlinkCluster`'s ``env()``); ``log``: where the client's output
    goes; ``savepoint``: the path of a savepoint (:func:`stop_with_savepoint`) the job starts from,
    at its parallelism whatever the savepoint's (its state is keyed: Flink redistributes it)."""
    import os
    import re

    from pipeline.flink_cluster import FLINK_HOME
    from tokenizer_service.errors import TokmaintError

    done = subprocess.run(
        [
            "bash",
            str(FLINK_HOME / "bin" / "flink"),
            "run",
            "--detached",
            "-m",
            master,
            *(["--fromSavepoint", savepoint] if savepoint else []),
            "-pyexec",
            sys.executable,
            "-pyclientexec",
            sys.executable,
            "-pym",
            "pipeline.flink_job",
            spec.model_dump_json(),
        ],
        env=env or {**os.environ, "FLINK_HOME": str(FLINK_HOME)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    if log is not None:
        log.write_text(output)
    found = re.search(r"JobID ([0-9a-f]{32})", output)
    if done.returncode or not found:
        # The program's own error (a Python traceback) rather than the client's Java stack around it.
        shown = output[output.find("Traceback") :][:4000] if "Traceback" in output else output[-4000:]
        raise TokmaintError(f"flink run -m {master} failed ({done.returncode}): {shown}")
    return found[1]


def jobmanager(master: str, *, wait: float) -> dict[str, Any]:
    """The overview of the Flink JobManager whose REST address is ``master`` (``HOST:PORT``),
    waited for up to ``wait`` seconds as the other parts are (``pipeline.parts.wait_for``); one
    line naming the address when none answers, or when what answers is no JobManager."""
    import httpx

    from pipeline.parts import wait_for
    from tokenizer_service.errors import TokmaintError

    def overview() -> Any:
        try:
            return httpx.get(f"http://{master}/overview", timeout=5).raise_for_status().json()
        except (httpx.HTTPStatusError, ValueError):  # something else answers there: a 404, not JSON
            return None
        except httpx.HTTPError as exc:
            raise ConnectionError(str(exc) or type(exc).__name__) from None

    found = wait_for(f"the Flink JobManager at {master}", overview, wait=wait, errors=(ConnectionError,))
    if not isinstance(found, dict) or "flink-version" not in found:
        raise TokmaintError(f"what answers at {master} is not a Flink JobManager's REST API (check --flink-master)")
    return found


def wait_for_job(
    rest_url: str, job_id: str, *, timeout: float, until: Callable[[], bool] | None = None
) -> dict[str, Any]:
    """The job's REST summary once it has ended (or, while it runs, once ``until()`` is true)."""
    import httpx

    from tokenizer_service.errors import TokmaintError

    deadline = time.monotonic() + timeout
    while (job := httpx.get(f"{rest_url}/jobs/{job_id}", timeout=10).json())["state"] not in ENDED and not (
        until is not None and until()
    ):
        if time.monotonic() > deadline:
            raise TokmaintError(f"the Flink job {job_id} at {rest_url} is still {job['state']} after {timeout:g} s")
        time.sleep(0.5)
    return job


def drain(
    master: str, spec_settings: PipelineSettings, lineage: str, *, timeout: float = 600.0, wait: float = 30.0
) -> dict[str, Any]:
    """Stop the lineage's running job once its source has read the docs topic to the end (its
    offsets, committed at each checkpoint, at the partitions' high watermarks), with a drain:
    the watermark goes to the end of time, every window left is written, the job finishes. Its
    REST summary. No JobManager at ``master`` (within ``wait`` seconds), or no job of the lineage
    that has not ended, is said at once in one line."""
    import httpx

    from tokenizer_service.errors import TokmaintError

    jobmanager(master, wait=wait)
    try:
        return _drain(master, spec_settings, lineage, timeout=timeout)
    except httpx.HTTPError as exc:  # it went away meanwhile
        raise TokmaintError(f"the Flink JobManager at {master}: {exc or type(exc).__name__}") from None


def _drain(master: str, spec_settings: PipelineSettings, lineage: str, *, timeout: float) -> dict[str, Any]:
    import httpx
    from confluent_kafka import TopicPartition

    from pipeline.kafka import end_offsets, partitions, read_topic, reader
    from tokenizer_service.errors import TokmaintError

    rest, deadline = f"http://{master}", time.monotonic() + timeout
    job_id = _running_job(master, lineage, deadline=deadline)
    topic = spec_settings.docs_topic
    ends = end_offsets(read_topic(spec_settings.bootstrap, topic, quiet_ms=1000))
    consumer = reader(spec_settings.bootstrap, **{"group.id": f"tokmaint-flink-{lineage}"})
    try:
        found = [TopicPartition(topic, p) for p in partitions(consumer, topic)]
        while any(tp.offset < ends.get(tp.partition, 0) for tp in consumer.committed(found, timeout=10)):
            if time.monotonic() > deadline:
                raise TokmaintError(f"the job tokmaint-{lineage} did not read the topic to its end in {timeout:g} s")
            time.sleep(1.0)
    finally:
        consumer.close()
    httpx.post(f"{rest}/jobs/{job_id}/stop", json={"drain": True}, timeout=30).raise_for_status()
    job = wait_for_job(rest, job_id, timeout=max(deadline - time.monotonic(), 0))
    if job["state"] != "FINISHED":
        raise TokmaintError(f"the job tokmaint-{lineage} ended {job['state']} while draining")
    return job


def _running_job(master: str, lineage: str, *, deadline: float) -> str:
    """The id of the lineage's running job at ``master``: one just submitted, or restarting after
    a TaskManager died, is waited for until ``deadline`` (``time.monotonic``); none that has not
    ended is said at once."""
    from tokenizer_service.errors import TokmaintError

    rest, name = f"http://{master}", f"tokmaint-{lineage}"
    while True:
        jobs = _jobs(rest, name)
        if running := [j for j in jobs if j["state"] == "RUNNING"]:
            return str(running[0]["jid"])
        if all(j["state"] in ENDED for j in jobs):
            ended = f" (the last one ended {jobs[-1]['state']})" if jobs else ""
            raise TokmaintError(f"no job {name} runs at {master}{ended}")
        if time.monotonic() > deadline:
            raise TokmaintError(f"no running job {name} at {master} within the time given")
        time.sleep(1.0)


def stop_with_savepoint(
    master: str, lineage: str, *, directory: str | None = None, timeout: float = 600.0, wait: float = 30.0
) -> dict[str, Any]:
    """Stop the lineage's running job with a savepoint (no drain: the windows not yet complete
    stay in it, to be finished by the job started from it): ``job_id``, ``state`` and the
    savepoint's ``savepoint`` path, what ``pipeline flink --from-savepoint`` takes. ``directory``:
    where it goes (a path every process of the cluster reaches); None: the cluster's
    ``execution.checkpointing.savepoint-dir``. No JobManager at ``master``, or no job of the
    lineage running there, is said at once in one line, as a savepoint that fails is."""
    import httpx

    from tokenizer_service.errors import TokmaintError

    jobmanager(master, wait=wait)
    rest, deadline = f"http://{master}", time.monotonic() + timeout
    body: dict[str, Any] = {"drain": False}
    if directory is not None:
        body["targetDirectory"] = savepoint_target(directory)
    try:
        job_id = _running_job(master, lineage, deadline=deadline)
        # A savepoint needs every task running. A job whose TaskManager just died looks running until
        # the JobManager notices, and is then restored: a savepoint it refuses meanwhile is asked again.
        while "location" not in (operation := _savepoint(rest, job_id, body, deadline=deadline)):
            cause = operation.get("failure-cause", {}).get("stack-trace", "")
            if not any(passing in cause for passing in RESTORING) or time.monotonic() > deadline:
                first = cause.splitlines()[:1]
                raise TokmaintError(f"the savepoint of job tokmaint-{lineage} failed: {' '.join(first) or operation}")
            time.sleep(1.0)
            job_id = _running_job(master, lineage, deadline=deadline)
    except httpx.HTTPError as exc:
        raise TokmaintError(f"the Flink JobManager at {master}: {exc or type(exc).__name__}") from None
    job = wait_for_job(rest, job_id, timeout=max(deadline - time.monotonic(), 1))
    return {"job_id": job_id, "state": job["state"], "savepoint": operation["location"]}


def savepoint_target(directory: str) -> str:
    """Where Flink is asked to put a savepoint: a URI as it is (``s3://``, ``file:///``), a path as
    the absolute ``file:`` URI of this machine's path (the JobManager has another working folder).

    >>> savepoint_target("s3://bucket/savepoints"), savepoint_target("/srv/flink/savepoints")
    ('s3://bucket/savepoints', 'file:///srv/flink/savepoints')
    """
    return directory if "://" in directory else Path(directory).resolve().as_uri()


def _savepoint(rest: str, job_id: str, body: dict[str, Any], *, deadline: float) -> dict[str, Any]:
    """Ask for job ``job_id``'s stop with a savepoint (``body``: Flink's request) and wait for its
    end: Flink's ``operation``, with the savepoint's ``location``, or its ``failure-cause``."""
    import httpx

    from tokenizer_service.errors import TokmaintError

    trigger = httpx.post(f"{rest}/jobs/{job_id}/stop", json=body, timeout=30).raise_for_status().json()
    while (found := httpx.get(f"{rest}/jobs/{job_id}/savepoints/{trigger['request-id']}", timeout=10).json())["status"][
        "id"
    ] != "COMPLETED":
        if time.monotonic() > deadline:
            raise TokmaintError(f"the savepoint of job {job_id} was not done in the time given")
        time.sleep(0.5)
    operation: dict[str, Any] = found.get("operation") or {}
    return operation


def _jobs(rest: str, name: str) -> list[dict[str, Any]]:
    """The cluster's jobs called ``name``, the last started last."""
    import httpx

    jobs = httpx.get(f"{rest}/jobs/overview", timeout=10).json()["jobs"]
    return sorted((j for j in jobs if j["name"] == name), key=lambda j: j.get("start-time", 0))


if __name__ == "__main__":
    # The job's functions from the module by its name, not ``__main__``: what they hand on (a
    # WindowPart) unpickles in a TaskManager, where ``__main__`` is not this module.
    from pipeline.flink_job import main as job_main

    job_main(sys.argv[1:])
