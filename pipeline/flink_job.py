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
  resend meets its first copy and is dropped; each shard's documents of a window are tallied in
  one batched Python call (``WordTally``: words, word pairs across boundaries; no version needed).
* **One writer** (parallelism 1) adds a window's tallies once the watermark has passed it, counts
  them with the lineage's current version (``StepCounter.count_tally``: ``pipeline run``'s numbers
  exactly, neighbours included), and writes the step with ``LineageStatistics``: the same atomic
  write and revision commit the local job uses. A window ending no later than the last one written
  is a replay after a restore, skipped: a TaskManager killed mid-run changes nothing.

Submitted by ``tokmaint pipeline flink LINEAGE --flink-master HOST:PORT --step-seconds S`` (with
``pipeline run``'s options), which calls :func:`submit`: ``flink run`` of this module, the
settings as one JSON argument::

    job_id = submit(FlinkJobSpec(lineage="git", registry=url, pipeline=settings, stream=stream, step_seconds=3600),
                    master="127.0.0.1:8081")
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pipeline.config import PipelineSettings
from tokenizer_service.evolve import StreamSettings

WINDOW = -1  # the "partition" under which the statistics keep a step's position: its window's end (ms)
# A window is whole milliseconds, and Flink SQL's intervals hold at most 999,999 days.
MIN_STEP_SECONDS, MAX_STEP_SECONDS = 0.001, 1e9
ENDED = ("FINISHED", "FAILED", "CANCELED")  # a job's states it does not leave
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
    parallelism: int = Field(2, ge=1)
    checkpoint_ms: int = Field(2000, ge=100)
    # Explicit end offsets (partition -> offset): the job stops there (a benchmark, a test).
    # None: it runs until cancelled.
    bounded: dict[int, int] | None = None


def shard_of(doc_id: str, shards: int) -> int:
    """The shard a document's copies all go to (stable across processes, unlike ``hash``).

    >>> shard_of("doc-1", 4) == shard_of("doc-1", 4), 0 <= shard_of("x", 4) < 4
    (True, True)
    """
    return zlib.crc32(doc_id.encode("utf-8")) % shards


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
    from pyflink.datastream.state import ListStateDescriptor
    from pyflink.table import DataTypes, Schema, StreamTableEnvironment

    settings = spec.pipeline
    step_ms = round(spec.step_seconds * 1000)
    tables = StreamTableEnvironment.create(env)
    tables.execute_sql(_source_table(spec))
    records = tables.to_data_stream(tables.sql_query("SELECT `value`, rowtime FROM records"))

    class Decode(ProcessFunction):
        def open(self, runtime_context: Any) -> None:
            self.dead = DeadLetters(settings)

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
            if ctx.timestamp() == OUTSIDE_WINDOW:  # the source saw a timestamp outside the window
                self.dead.send(
                    value,
                    f"its record's timestamp is outside the event-time window (not after 1970, or more than "
                    f"{settings.max_future_seconds:,g} s ahead of the clock), not its ts ({doc.ts_ms} ms): "
                    "the producer must set it (tokmaint ingest does)",
                )
                return
            if doc.ts_ms != ctx.timestamp():
                self.dead.send(
                    value,
                    f"its record's timestamp ({ctx.timestamp()}) is not its ts ({doc.ts_ms} ms): "
                    "the producer must set it (tokmaint ingest does)",
                )
                return
            # Its window closed here already: the windows downstream may have been written without it.
            if (doc.ts_ms // step_ms + 1) * step_ms - 1 <= ctx.timer_service().current_watermark():
                self.dead.send(
                    value,
                    f"late: more than {spec.max_lateness_seconds:g} s behind its partition's "
                    "event time, after its window was written",
                )
                return
            yield Row(shard_of(doc.id, spec.shards), json.dumps([doc.id, doc.text]))

    class Tally(ProcessFunction):
        """A shard's documents of one window (one row: its window's last millisecond as its
        timestamp, the documents joined by Flink SQL's LISTAGG), resends dropped, tallied in one call."""

        def open(self, runtime_context: Any) -> None:
            from registry.client import RegistryClient

            with RegistryClient(spec.registry) as registry:  # any version: the pre-tokenizer is the lineage's
                self.tokenizer = registry.tokenizer(spec.lineage)

        def process_element(self, row: Any, ctx: ProcessFunction.Context) -> Iterable[Any]:
            from tokenizer_service.counting import WordTally

            texts: dict[str, str] = {}
            copies = 0
            for line in row[1].split("\n"):
                doc_id, text = json.loads(line)
                copies += 1
                texts.setdefault(doc_id, text)
            yield (
                ctx.timestamp() + 1,
                WordTally.of(self.tokenizer, list(texts.values())),
                list(texts),
                copies - len(texts),
            )

    class WriteSteps(KeyedProcessFunction):
        """The windows' tallies, added and written as steps in event-time order once the
        watermark has passed them."""

        def open(self, runtime_context: Any) -> None:
            from pipeline.lineage_statistics import LineageStatistics
            from pipeline.parts import connect_redis
            from registry.client import RegistryClient

            self.pending = runtime_context.get_list_state(ListStateDescriptor("tallies", Types.PICKLED_BYTE_ARRAY()))
            self.registry = RegistryClient(spec.registry)
            self.stats = LineageStatistics(
                stream=spec.stream,
                redis_client=connect_redis(settings.redis),
                registry=self.registry,
                lineage=spec.lineage,
            )
            self.stats.resume()

        def close(self) -> None:
            self.stats.close()
            self.registry.close()

        def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any]:
            self.pending.add(value)
            ctx.timer_service().register_event_time_timer(value[0] - 1)  # the window's last millisecond
            return ()

        def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterable[Any]:
            ready, later = {}, []
            for end, tally, ids, resent in self.pending.get():
                if end - 1 <= timestamp:
                    total = ready.setdefault(end, [None, [], 0])
                    total[0] = tally if total[0] is None else total[0].add(tally)
                    total[1] += ids
                    total[2] += resent
                else:
                    later.append((end, tally, ids, resent))
            self.pending.update(later)
            for end in sorted(ready):
                began = time.perf_counter()
                tally, ids, resent = ready[end]
                if self.write(end, tally, ids):
                    yield json.dumps(
                        {
                            "window_end_ms": end,
                            "documents": tally.documents,
                            "resent": resent,
                            "step": self.stats.store.step,
                            "version": self.stats.tedtok.version,
                            "seconds": time.perf_counter() - began,
                            "at": time.time(),
                        }
                    )

        def write(self, end: int, tally: Any, ids: list[str]) -> bool:
            stats = self.stats
            if stats.store.meta()["offsets"].get(WINDOW, -1) >= end:  # a replay after a restore: written already
                return False
            if stats.outdated():
                stats.follow()
            counts = stats.tedtok.counter.count_tally(tally, neighbours=True)
            stats.observe(
                counts,
                offsets={WINDOW: end},
                ids=sorted(ids),
                documents=tally.documents,
                keep_ids_steps=settings.dedupe_steps or None,
            )
            return True

    docs = records.process(Decode(), Types.ROW_NAMED(["shard", "doc"], [Types.INT(), Types.STRING()]))
    # The windows in Java (Flink SQL): a document costs Python nothing past its decoding.
    tables.create_temporary_view(
        "docs",
        tables.from_data_stream(
            docs,
            Schema.new_builder()
            .column("shard", DataTypes.INT())
            .column("doc", DataTypes.STRING())
            .column_by_metadata("rowtime", DataTypes.TIMESTAMP_LTZ(3))
            .watermark("rowtime", "SOURCE_WATERMARK()")
            .build(),
        ),
    )
    windows = tables.sql_query(
        "SELECT shard, LISTAGG(doc, '\n') AS docs, window_time FROM TABLE(TUMBLE(TABLE docs, DESCRIPTOR(rowtime), "
        f"{_interval(step_ms)})) GROUP BY shard, window_start, window_end, window_time"
    )
    tallies = tables.to_data_stream(windows).process(Tally(), Types.PICKLED_BYTE_ARRAY())
    (
        tallies.key_by(lambda _: 0, Types.INT())
        .process(WriteSteps(), Types.STRING())
        .set_parallelism(1)
        .name("write steps")
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


def _interval(ms: int) -> str:
    """A Flink SQL interval of ``ms`` milliseconds.

    >>> _interval(90_061_001)
    "INTERVAL '1 01:01:01.001' DAY(6) TO SECOND(3)"
    """
    days, rest = divmod(ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"INTERVAL '{days} {hours:02d}:{minutes:02d}:{rest // 1000:02d}.{rest % 1000:03d}' DAY(6) TO SECOND(3)"


def main(argv: list[str]) -> None:
    """The program ``flink run -py`` runs: the spec (JSON), then the job, submitted detached."""
    from pyflink.datastream import StreamExecutionEnvironment

    from pipeline.flink_cluster import FLINK_HOME
    from pipeline.flink_jars import connector_jars

    spec = FlinkJobSpec.model_validate_json(argv[0])
    env = StreamExecutionEnvironment.get_execution_environment()
    # pipeline.jars replaces the Python runner's jar unless it is listed too.
    jars = [*connector_jars(), *sorted((FLINK_HOME / "opt").glob("flink-python-*.jar"))]
    env.add_jars(*[jar.as_uri() for jar in jars])
    env.set_parallelism(spec.parallelism)
    env.enable_checkpointing(spec.checkpoint_ms)
    build(env, spec)
    env.execute(f"tokmaint-{spec.lineage}")


def submit(spec: FlinkJobSpec, *, master: str, env: dict[str, str] | None = None, log: Path | None = None) -> str:
    """Submit the job to the cluster whose REST address is ``master`` (``HOST:PORT``) with Flink's
    command-line client, detached; its job id. ``env``: the client's environment (a
    :class:`~pipeline.flink_cluster.FlinkCluster`'s ``env()``); ``log``: where the client's output goes."""
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
    name = f"tokmaint-{lineage}"
    # Just submitted, or restarting after a TaskManager died: it is waited for. None that has not ended: said now.
    while True:
        jobs = _jobs(rest, name)
        if running := [j for j in jobs if j["state"] == "RUNNING"]:
            break
        if all(j["state"] in ENDED for j in jobs):
            ended = f" (the last one ended {jobs[-1]['state']})" if jobs else ""
            raise TokmaintError(f"no job {name} runs at {master}{ended}")
        if time.monotonic() > deadline:
            raise TokmaintError(f"no running job {name} at {master} within {timeout:g} s")
        time.sleep(1.0)
    job_id = running[0]["jid"]
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


def _jobs(rest: str, name: str) -> list[dict[str, Any]]:
    """The cluster's jobs called ``name``, the last started last."""
    import httpx

    jobs = httpx.get(f"{rest}/jobs/overview", timeout=10).json()["jobs"]
    return sorted((j for j in jobs if j["name"] == name), key=lambda j: j.get("start-time", 0))


if __name__ == "__main__":
    main(sys.argv[1:])
