"""``tokmaint bench flink``: the scale-out job on a real Flink cluster, end to end, against the
offline replay and against ``pipeline run`` on the same topic.

It starts a broker, a redis-server, a registry and a Flink cluster (a JobManager and
``taskmanagers`` TaskManagers of a slot each, :class:`~pipeline.flink_cluster.FlinkCluster`),
trains the initial tokenizer on the oldest ``init_share`` of the corpus, ingests the corpus
(then three documents dated 2099, 9999 and 1960 with those Kafka timestamps, then a few records
that are not Documents), and runs the job. With ``kill`` or ``savepoint`` the corpus comes in
two, cut at two thirds of its time, the three misdated documents after the first part: with
``kill``, once the job has written a third of the steps one TaskManager is killed with SIGKILL
and a replacement started (Flink restores the job from its last checkpoint); with ``savepoint``,
once it is restored (or once a third of the steps are written, without a kill) the job is
stopped with a savepoint (``pipeline.flink_job.stop_with_savepoint``). Then the rest is ingested
(and the records that are not Documents), the job started again from the savepoint, and drained
(``pipeline.flink_job.drain``). The kill and the savepoint so land between two steps, with windows
still to come. With neither, the job runs bounded at the topic's end offsets.

Printed: ``documents``, ``steps``, ``versions``, ``dead_lettered`` (and ``dead_letter_reasons``:
the job's), ``taskmanager_killed`` (and ``killed_at_step``: the steps written when it died),
``savepoint_resumed`` (and ``savepoint``: its path), ``equal_to_replay`` (the Redis statistics
and every published version equal Ted-Tok run offline over the same windows of the same
documents), ``flink_mb_s`` (the
documents' megabytes over the job's time on the cluster, both jobs' with a savepoint),
``local_mb_s`` (``pipeline run --step-seconds`` on the same topic in the same run),
``ratio_to_local``, ``serial_fraction`` (the share of the job's time its one writer spent adding
the parts, counting again those of a replaced version, writing steps and revising) and
``seconds``; also ``startup_seconds`` (from the job's start to its first step written: tasks
deployed, Python started, the first window filled), ``flink_steady_mb_s`` (the rate once running:
``_steady_mb_s``) from the writer's line for each step (``steps_timed`` says how many there
were), ``taskmanagers``, ``writers``, ``execution_mode`` (how each Python operator ran, as its
subtasks said), ``shards_by_subtask`` (the shards each counting subtask counted), ``cores``
and ``mb_s_per_core`` (the job's steady rate and the local job's rate over them) and
``checkpoint_ms_p50`` (Flink's median checkpoint, end to end). A kill can take the lines of the
steps written just before it, and with them their share of ``serial_fraction``;
``startup_seconds`` is null with no line, ``flink_steady_mb_s`` with no run of three.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from collections import defaultdict
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import redis

from pipeline.bench import CorpusStreamSettings
from pipeline.flink_cluster import FlinkCluster
from pipeline.flink_job import FlinkJobSpec, drain, shard_keys, stop_with_savepoint, submit, wait_for_job
from pipeline.ingest import ingest
from pipeline.job import PipelineJob
from pipeline.kafka import Producer, Record, end_offsets, read_topic
from pipeline.local_servers import start_stream_servers
from pipeline.redis_store import RedisStatsStore
from pipeline.config import PipelineSettings
from registry.client import RegistryClient
from schemas.document import DEFAULT_MAX_FUTURE_SECONDS, RecordError, decode_document, event_time_refusal
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import Document, oldest, read_corpus
from tokenizer_service.errors import TokmaintError
from tokenizer_service.evolve import StreamSettings
from tokenizer_service.settings import SettingsConfigDict, setting, whole
from tokenizer_service.stats_store import MemoryStatsStore
from tokenizer_service.tedtok import TedTok

LINEAGE, LOCAL_LINEAGE = "flink", "local"
# Each dead-lettered, with its reason. The last is a Document dated at the epoch, which a Kafka
# client stamps with the clock (0 is "now" to it).
BAD_RECORDS = [b"not json", b'{"id": "x"}', b"\xff\xfe", b'{"id": "epoch", "text": "at 0", "ts": "1970-01-01T00:00Z"}']
# Documents dated outside the event-time window, each with its ts as its Kafka timestamp (a producer
# other than tokmaint's: ingest refuses them), posted mid-stream: counted, the two dated ahead would
# move their partitions' event time past every document after them.
OUT_OF_WINDOW = [
    {"id": "ahead-2099", "text": "from the future", "ts": "2099-01-01T00:00:00Z"},
    {"id": "ahead-9999", "text": "the end of time", "ts": "9999-12-31T23:59:59Z"},
    {"id": "before-1970", "text": "before the epoch", "ts": "1960-06-01T00:00:00Z"},
]


class FlinkBenchSettings(CorpusStreamSettings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_FLINK_")

    steps: int = setting(40, whole(2), "event-time windows the corpus's time span is cut into (the steps)")
    interval_steps: int = setting(8, whole(1), "steps between revisions (the first after as many)")
    kill: bool = setting(True, None, "kill one TaskManager with SIGKILL once a third of the steps are written")
    savepoint: bool = setting(
        True,
        None,
        "stop the job with a savepoint (after the kill's restore, or once a third of the steps are written), "
        "post the stream's last third, and start the job from the savepoint",
    )
    taskmanagers: int = setting(2, whole(1), "TaskManagers of the cluster (a slot each; the job's parallelism)")


def replay(
    records: list[bytes],
    initial: BPETokenizer,
    stream: StreamSettings,
    *,
    step_seconds: float,
    max_future_seconds: float = DEFAULT_MAX_FUTURE_SECONDS,
) -> tuple[TedTok, dict[int, tuple[int, float]]]:
    """Ted-Tok run offline over the topic's documents in the job's steps: windows of
    ``step_seconds`` of event time in order, a document's resends dropped, those dated outside the
    event-time window left out; and each step's documents and megabytes, by its window's end in
    milliseconds (as the job's windows end)."""
    now = datetime.now(timezone.utc)
    windows: dict[int, dict[str, str]] = defaultdict(dict)
    step_ms = round(step_seconds * 1000)
    for value in records:
        try:
            doc = decode_document(value)
        except RecordError:
            continue
        if event_time_refusal(doc.ts, now=now, max_future_seconds=max_future_seconds):
            continue
        windows[doc.ts_ms // step_ms].setdefault(doc.id, doc.text)
    config = stream.tedtok_config()
    tedtok = TedTok(initial, config=config, store=MemoryStatsStore(alpha=config.alpha), lineage=LINEAGE)
    steps = {}
    for window in sorted(windows):
        tedtok.observe_texts(texts := list(windows[window].values()))
        steps[(window + 1) * step_ms] = (len(texts), sum(len(t.encode("utf-8")) for t in texts) / 1e6)
    return tedtok, steps


def equal_to_replay(tedtok: TedTok, client: redis.Redis, registry: RegistryClient, lineage: str) -> dict[str, bool]:
    """Whether the lineage's statistics in Redis and its versions are the replay's."""
    store = RedisStatsStore.open(client, lineage=lineage)
    published = [v.sha256 for v in sorted(registry.versions(lineage, limit=1000).data, key=lambda v: v.number)]
    ids = np.arange(max(tedtok.tokenizer.id_space, 1))
    keys, values = tedtok.store.top_pairs(tedtok.store.tracked_pairs)
    live_keys, live_values = store.top_pairs(tedtok.store.tracked_pairs)
    return {
        "versions_equal": [r.tokenizer.sha256 for r in tedtok.revisions] == published[1:],
        "tokens_equal": bool(np.allclose(store.token(ids), tedtok.store.token(ids), rtol=1e-9, atol=1e-12)),
        "pairs_equal": set(keys.tolist()) == set(live_keys.tolist())
        and bool(np.allclose(np.sort(values), np.sort(live_values), rtol=1e-9, atol=1e-12)),
    }


def _written(log_dir: Path) -> dict[int, dict[str, Any]]:
    """What the writer said of each step it wrote (its lines in the TaskManagers' output), by window end."""
    return {step["window_end_ms"]: step for step in _said(log_dir, '{"window_end_ms"')}


def _said(log_dir: Path, opening: str) -> list[dict[str, Any]]:
    """The JSON objects starting with ``opening`` in the TaskManagers' output. The job's Python
    and Flink's print sink share a JVM's stdout, so one's line may break into the other's: each
    object is read from where it opens to where it closes."""
    decoder = json.JSONDecoder()
    found = []
    for out in log_dir.glob("*.out"):
        text = out.read_text(errors="replace")
        at = text.find(opening)
        while at >= 0:
            try:
                found.append(decoder.raw_decode(text, at)[0])
            except json.JSONDecodeError:  # cut by the kill that ended its TaskManager
                pass
            at = text.find(opening, at + 1)
    return found


def _steady_mb_s(written: dict[int, dict[str, Any]], steps: dict[int, tuple[int, float]]) -> float | None:
    """The job's rate once running: over each run of the writer (a start, a restore after a kill,
    a resume from a savepoint), the megabytes of its steps but its first and its last over the
    time from its first to the one before its last, all runs together. The first comes after the
    start-up; the last may wait for a drain (the stream's last window is written when the
    watermark is moved to the end). None with no run of three steps.

    >>> lines = {end: {"run": run, "at": at} for end, run, at in
    ...          [(1, "a", 10.0), (2, "a", 11.0), (3, "a", 12.0), (4, "b", 50.0), (5, "b", 51.0), (6, "b", 90.0)]}
    >>> _steady_mb_s(lines, {end: (1, 3.0) for end in lines})  # 6 MB in 2 s: the gaps left out
    3.0
    """
    runs: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for end, step in written.items():
        runs[step["run"]].append((step["at"], end))
    megabytes = seconds = 0.0
    for timed in runs.values():
        timed.sort()
        if len(timed) > 2:
            megabytes += sum(steps[end][1] for _, end in timed[1:-1])
            seconds += timed[-2][0] - timed[0][0]
    return megabytes / max(seconds, 1e-9) if megabytes else None


def _restored(rest_url: str, job_id: str, *, since: float) -> bool:
    """Whether the job has restarted since ``since`` (a time.time()) and runs every task again."""
    import httpx

    job = httpx.get(f"{rest_url}/jobs/{job_id}", timeout=10).json()
    return (
        job["state"] == "RUNNING"
        and job.get("timestamps", {}).get("RESTARTING", 0) / 1000 >= since
        and all(v["tasks"].get("RUNNING", 0) == v["parallelism"] for v in job["vertices"])
    )


def _execution_modes(log_dir: Path) -> dict[str, str]:
    """How each of the job's Python operators ran, as its subtasks said in the TaskManagers'
    output (``flink_job.report_mode``): ``thread``, ``process``, or both joined by ``+`` when its
    subtasks differed."""
    modes: dict[str, set[str]] = defaultdict(set)
    for said in _said(log_dir, '{"operator"'):
        modes[said["operator"]].add(said["execution_mode"])
    return {operator: "+".join(sorted(found)) for operator, found in sorted(modes.items())}


def _shards_by_subtask(log_dir: Path, shards: int) -> list[list[int]]:
    """Which shards each subtask of the counting stage counted, as it said in the TaskManagers'
    output (``flink_job.report_shards``): a list for each subtask's start (a restore is
    another), sorted."""
    shard_of_key = {key: shard for shard, key in enumerate(shard_keys(shards))}
    counted: dict[str, set[int]] = defaultdict(set)
    for said in _said(log_dir, '{"counting_subtask"'):
        counted[said["counting_subtask"]].update(shard_of_key[key] for key in said["shard_keys"])
    return sorted(sorted(found) for found in counted.values())


def _checkpoint_ms_p50(rest_url: str, jobs: list[str]) -> float | None:
    """The median time of the jobs' completed checkpoints, end to end (Flink's checkpoint
    statistics; the median of each job's median when there are several); None with none."""
    import httpx

    medians = []
    for job_id in jobs:
        summary = httpx.get(f"{rest_url}/jobs/{job_id}/checkpoints", timeout=10).json().get("summary") or {}
        p50 = (summary.get("end_to_end_duration") or {}).get("p50")
        if p50 is not None and summary.get("end_to_end_duration", {}).get("max", 0) > 0:
            medians.append(float(p50))
    return float(np.median(medians)) if medians else None


def _ingest(docs: list[Document], path: Path, pipeline: PipelineSettings, *, progress: bool) -> None:
    """``docs`` posted to the docs topic as ``tokmaint pipeline ingest`` posts a file of them."""
    path.write_text(
        "".join(json.dumps({"ts": d.ts.isoformat(), "text": d.text}) + "\n" for d in docs), encoding="utf-8"
    )
    ingest(path, pipeline, progress=progress)


def _send_bad_records(bootstrap: str) -> None:
    """A few records that are not Documents, after the last document. Their Kafka timestamps are
    the clock's, the event time the job's watermark reads before decoding: sent before the rest
    of a stream of years ago, they would move their partitions' event time past it, and once all
    of one source reader's partitions had one, every document it read after was late."""
    with Producer(bootstrap) as producer:
        producer.send_all("docs", [Record(value) for value in BAD_RECORDS])


def _send_out_of_window(bootstrap: str) -> None:
    """The documents dated outside the event-time window, each with its ts as its Kafka timestamp."""
    with Producer(bootstrap) as producer:
        records = [json.dumps(doc).encode() for doc in OUT_OF_WINDOW]
        producer.send_all("docs", [Record(value, timestamp=decode_document(value).ts_ms) for value in records])


def _read_all(bootstrap: str, docs: list[Document]) -> list[Any]:
    """The docs topic's records once all of ``docs``, the documents dated outside the window and
    the records that are not Documents are in."""
    return read_topic(bootstrap, "docs", expected=len(docs) + len(OUT_OF_WINDOW) + len(BAD_RECORDS))


def run_flink_bench(
    corpus: str | Path, settings: FlinkBenchSettings | None = None, *, progress: bool = True, pin: bool = False
) -> dict[str, Any]:
    """The benchmark's figures (the module's docstring). ``pin``: each TaskManager on a CPU of its
    own (``taskset``), and ``mb_s_per_core`` per TaskManager's CPU; otherwise per CPU of the machine."""
    settings = settings or FlinkBenchSettings()
    started = time.perf_counter()
    cores = sorted(os.sched_getaffinity(0))[: settings.taskmanagers] if pin else None
    if cores is not None and len(cores) < settings.taskmanagers:
        raise TokmaintError(
            f"{settings.taskmanagers} TaskManagers pinned to a CPU each need as many; this process has {len(cores)}"
        )
    n_cores = len(cores) if cores else len(os.sched_getaffinity(0))
    docs = [d for d in oldest(read_corpus(corpus, progress=progress), settings.max_mb) if d.ts is not None]
    if len(docs) < settings.steps:
        raise TokmaintError(f"{corpus}: {len(docs)} timestamped documents, fewer than --steps {settings.steps}")
    texts = [d.text for d in docs]
    initial = BPETokenizer.train(
        texts[: max(1, round(settings.init_share * len(texts)))], vocab_size=settings.vocab_size, progress=progress
    )
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    span = (docs[-1].ts - docs[0].ts).total_seconds()
    step_seconds = max(1.0, round(span / settings.steps))
    step_docs = max(1, len(docs) // settings.steps)
    stream = StreamSettings(
        step_docs=step_docs,
        interval_docs=settings.interval_steps * step_docs,
        horizon_docs=8 * settings.interval_steps * step_docs,
        warmup_docs=settings.interval_steps * step_docs,
    )
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="tokmaint-bench-flink-") as root:
        servers, bootstrap, redis_url, registry_url = start_stream_servers(Path(root), token=token)
        try:
            pipeline = PipelineSettings(
                bootstrap=bootstrap, redis=redis_url, docs_topic="docs", dlq_topic="docs.dlq", step_seconds=step_seconds
            )
            # With a kill or a savepoint the stream comes in two, cut by time: the job is killed once it
            # has written a third of the steps from the first two thirds (and stopped with a savepoint
            # at half), before the rest has arrived, so both land between steps (whole, a short
            # stream's windows fire in one burst).
            two_parts = settings.kill or settings.savepoint
            cut = docs[0].ts + (docs[-1].ts - docs[0].ts) * 2 / 3 if two_parts else docs[-1].ts
            first, rest = [d for d in docs if d.ts <= cut], [d for d in docs if d.ts > cut]
            _ingest(first, Path(root) / "first.jsonl", pipeline, progress=progress)
            _send_out_of_window(bootstrap)
            if not two_parts:
                _send_bad_records(bootstrap)
            read = [] if two_parts else _read_all(bootstrap, docs)  # in two parts: once the rest is in
            client = redis.Redis.from_url(redis_url)
            with RegistryClient(registry_url, token=token) as registry:
                registry.create(LINEAGE, initial.to_json())
                with FlinkCluster(
                    Path(root) / "flink",
                    taskmanagers=settings.taskmanagers,
                    cores=cores,
                    env={"TOKMAINT_REGISTRY_TOKEN": token},
                ) as cluster:
                    master = f"127.0.0.1:{cluster.rest_port}"
                    spec = FlinkJobSpec(
                        lineage=LINEAGE,
                        registry=registry_url,
                        pipeline=pipeline,
                        stream=stream,
                        step_seconds=step_seconds,
                        # Whole, the job stops at each partition's end as read (tansu's listed end
                        # offsets are the last batch's start, not its end); in two parts it is drained.
                        bounded=None if two_parts else end_offsets(read),
                        parallelism=settings.taskmanagers,
                    )
                    jobs = [submit(spec, master=master, env=cluster.env(), log=cluster.log_dir / "submit.log")]
                    killed_at: int | None = None  # the steps in Redis when the TaskManager died
                    savepoint: str | None = None

                    def steps_in_redis() -> int:
                        return RedisStatsStore(client, lineage=LINEAGE, alpha=stream.tedtok_config().alpha).meta()[
                            "step"
                        ]

                    def running_until(steps: int) -> None:
                        job = wait_for_job(
                            cluster.rest_url, jobs[-1], timeout=600, until=lambda: steps_in_redis() >= steps
                        )
                        if job["state"] != "RUNNING":
                            raise TokmaintError(f"the Flink job ended {job['state']}: {cluster.failure(jobs[-1])}")

                    if settings.kill:
                        running_until(settings.steps // 3)
                        killed = time.time()
                        cluster.kill_taskmanager(0)
                        killed_at = steps_in_redis()
                        cluster.start_taskmanager(wait=False)
                        if settings.savepoint:  # restored first: every task running again after the kill
                            wait_for_job(
                                cluster.rest_url,
                                jobs[-1],
                                timeout=600,
                                until=lambda: _restored(cluster.rest_url, jobs[-1], since=killed),
                            )
                    if settings.savepoint:
                        # Right after the restore (the job's state holds the windows not yet written:
                        # a restored job sees no watermark until records come), or once a third are written.
                        if not settings.kill:
                            running_until(settings.steps // 3)
                        savepoint = stop_with_savepoint(
                            master, LINEAGE, directory=str(Path(root) / "savepoints"), timeout=600
                        )["savepoint"]
                    if two_parts:  # the rest comes while the job is restored, or stopped with its savepoint
                        _ingest(rest, Path(root) / "rest.jsonl", pipeline, progress=progress)
                        _send_bad_records(bootstrap)
                        read = _read_all(bootstrap, docs)
                    if savepoint is not None:
                        log = cluster.log_dir / "resume.log"
                        jobs.append(submit(spec, master=master, env=cluster.env(), log=log, savepoint=savepoint))
                    if two_parts:
                        drain(master, pipeline, LINEAGE, timeout=900)
                    summaries = [wait_for_job(cluster.rest_url, job_id, timeout=900) for job_id in jobs]
                    if (job := summaries[-1])["state"] != "FINISHED":
                        raise TokmaintError(f"the Flink job ended {job['state']}: {cluster.failure(jobs[-1])}")
                    # Stopped with a savepoint, then started from it: the two jobs' times together.
                    flink_seconds = sum(summary["duration"] for summary in summaries) / 1000
                    started_at = summaries[0]["start-time"] / 1000
                    checkpoint_ms = _checkpoint_ms_p50(cluster.rest_url, jobs)
                    steps_written = _written(cluster.log_dir)
                    modes = _execution_modes(cluster.log_dir)
                    shards = _shards_by_subtask(cluster.log_dir, spec.shards)
                records = [r.value for r in read]
                tedtok, steps = replay(records, initial, stream, step_seconds=step_seconds)
                # A kill takes the lines of the steps written just before it whose output had not
                # been flushed (the restored job does not write those steps again): the timings are
                # the lines' that survived.
                serial = sum(step["seconds"] for step in steps_written.values())
                timed = sorted((step["at"], end) for end, step in steps_written.items())
                startup = timed[0][0] - started_at if timed else None
                steady = _steady_mb_s(steps_written, steps)
                compared = equal_to_replay(tedtok, client, registry, LINEAGE)
                reasons = {  # the job's dead letters, once each (ingest's have no key)
                    r.key: dict(r.headers)["tokmaint.reason"].decode()
                    for r in read_topic(bootstrap, "docs.dlq", quiet_ms=1000)
                    if r.key and r.key.startswith(b"docs:sha256:")
                }
                versions = registry.version(LINEAGE).number
                written = RedisStatsStore.open(client, lineage=LINEAGE).meta()
                registry.create(LOCAL_LINEAGE, initial.to_json())
                with closing(
                    PipelineJob(
                        settings=pipeline,
                        stream=stream,
                        redis_client=client,
                        registry=registry,
                        lineage=LOCAL_LINEAGE,
                        wait=1.0,
                    )
                ) as job_local:
                    local = job_local.run(until_idle=True)
                local_compared = equal_to_replay(tedtok, client, registry, LOCAL_LINEAGE)
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=30)
    flink_mb_s = megabytes / flink_seconds
    return {
        "documents": written["documents"],
        "steps": written["step"],
        "versions": versions,
        "dead_lettered": len(reasons),
        "dead_letter_reasons": sorted(reasons.values()),
        "taskmanager_killed": killed_at is not None,
        "killed_at_step": killed_at,
        "savepoint_resumed": savepoint is not None,
        "savepoint": savepoint,
        "taskmanagers": settings.taskmanagers,
        "writers": 1,
        "execution_mode": modes,
        "shards_by_subtask": shards,
        "equal_to_replay": all(compared.values()),
        **compared,
        "replay_steps": len(steps),
        "local_equal_to_replay": all(local_compared.values()),
        "flink_mb_s": flink_mb_s,
        "local_mb_s": local["mb_per_s"],
        "ratio_to_local": flink_mb_s / local["mb_per_s"],
        "serial_fraction": serial / flink_seconds,
        "flink_seconds": flink_seconds,
        "startup_seconds": startup,
        "flink_steady_mb_s": steady,
        "cores": n_cores,
        "mb_s_per_core": {"flink": steady and steady / n_cores, "local": local["mb_per_s"] / n_cores},
        "checkpoint_ms_p50": checkpoint_ms,
        "steps_timed": len(timed),
        "step_seconds": step_seconds,
        "megabytes": megabytes,
        "seconds": time.perf_counter() - started,
    }


def run_flink_scaling(
    corpus: str | Path, settings: FlinkBenchSettings | None = None, *, progress: bool = True
) -> dict[str, Any]:
    """``bench flink --scaling``: the same stream through the job with 1 TaskManager, then 2, each
    pinned to a CPU of its own, without a kill or a savepoint (the rate once running, not a
    restore, is what scales); both runs and ``scaling_efficiency``, the 2-TaskManager rate
    (``flink_steady_mb_s``) over twice the 1-TaskManager rate. The broker, Redis, the registry and
    the JobManager are not pinned: they share the machine's CPUs with the TaskManagers."""
    settings = settings or FlinkBenchSettings()
    runs = [
        run_flink_bench(
            corpus,
            settings.model_copy(update={"taskmanagers": n, "kill": False, "savepoint": False}),
            progress=progress,
            pin=True,
        )
        for n in (1, 2)
    ]
    one, two = (run["flink_steady_mb_s"] for run in runs)
    return {
        "taskmanagers": [run["taskmanagers"] for run in runs],
        "flink_steady_mb_s": [one, two],
        "equal_to_replay": all(run["equal_to_replay"] for run in runs),
        "scaling_efficiency": two / (2 * one) if one and two else None,
        "runs": runs,
    }
