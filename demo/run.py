"""``tokmaint demo`` (``make demo``): the whole loop on one machine, with no Docker.

It starts a Kafka-protocol broker (tansu), a ``redis-server`` and a registry server (SQLite) of
its own on free loopback ports, creates a lineage from the sample's oldest documents, and then,
at once:

* sends the shipped stream (``data/git-commits-sample.jsonl.gz``, 20 years of git commit
  messages) to the docs topic in time order, a chunk at a time, as a live stream would come;
* runs the pipeline job on it: statistics in Redis, Ted-Tok revisions published to the registry
  (with no ``redis-server`` installed, the statistics stay in the process: ``demo.in_process``);
* runs a trainer (a tiny GPT-2 on CPU) on the same topic, which applies every new version
  between two optimizer steps (a last short run takes the final version).

It ends with a report folder (``demo.report``) and stops every process it started, on Ctrl-C
too.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import redis
from pydantic import Field
from tqdm import tqdm

from demo.in_process import InProcessJob
from pipeline.ingest import ingest
from pipeline.job import PipelineJob
from pipeline.kafka import create_topic
from pipeline.local_servers import start_broker, start_redis
from pipeline.config import PipelineSettings
from registry.client import RegistryClient
from registry.local_server import start_server
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import read_corpus
from tokenizer_service.errors import TokmaintError
from tokenizer_service.evolve import StreamSettings
from tokenizer_service.output_dir import OutputDir
from tokenizer_service.settings import Number, Settings, SettingsConfigDict, setting, whole
from trainer.export import BOS_TOKENS
from trainer.config import TrainerSettings

log = logging.getLogger("tokmaint.demo")
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "git-commits-sample.jsonl.gz"
LINEAGE = "git-demo"
LAST_STEPS = 2  # the trainer's last run, from its checkpoint: it takes the final version


class DemoSettings(Settings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_DEMO_")

    corpus: Path = setting(SAMPLE, None, "the stream (shipped: a sample of git commit messages)")
    initial_docs: int = setting(1500, whole(1), "oldest documents the initial tokenizer trains on")
    vocab_size: int = setting(2048, whole(257), "the initial tokenizer's vocabulary")
    chunks: int = setting(24, whole(1), "parts the stream arrives in")
    pause: float = setting(1.5, Number(float, low=0), "seconds between two parts")
    trainer_steps: int = setting(1000, whole(1), "the trainer's steps while the stream goes on")
    engine: Literal["local", "flink"] = setting(
        "local",
        None,
        "where the pipeline runs: this process (pipeline run), or a Flink cluster started here (pipeline flink)",
    )
    redis: bool | None = None  # the statistics in a redis-server (None: when one is installed)
    stream: StreamSettings = Field(
        default_factory=lambda: StreamSettings(
            step_docs=64, horizon_docs=1600, interval_docs=320, warmup_docs=640, id_price=2.0
        )
    )


def trainer_on_docs_argv(registry_url: str, lineage: str, bootstrap: str) -> list[str]:
    """``tokmaint trainer run``'s arguments for a trainer of ``lineage`` that reads the ``docs``
    topic: the part the demo and the soak share (each adds its own steps, checkpoints, reports).

    >>> trainer_on_docs_argv("http://r", "news", "b:9092")[:4]
    ['trainer', 'run', '--registry', 'http://r']
    """
    return [
        "trainer",
        "run",
        "--registry",
        registry_url,
        "--lineage",
        lineage,
        "--topic",
        "docs",
        "--bootstrap",
        bootstrap,
    ]


def _say(message: str) -> None:
    log.info("demo: %s", message)


def _wait_for_reader(log: Path, trainer: subprocess.Popen, *, timeout: float = 120.0) -> None:
    """Until the trainer waits for documents on the topic (it says so in its log)."""
    deadline = time.monotonic() + timeout
    while "waiting for documents" not in log.read_text(encoding="utf-8", errors="replace"):
        if trainer.poll() is not None:
            raise TokmaintError(f"the trainer stopped: {log.read_text(encoding='utf-8')[-2000:]}")
        if time.monotonic() > deadline:
            raise TokmaintError(f"the trainer did not start reading the topic in {timeout:.0f} s")
        time.sleep(0.2)


class FlinkDemoJob:
    """The pipeline as a job on a Flink cluster of its own: submitted at once, unbounded, steps of
    event time as long on average as ``stream.step_docs`` documents; :meth:`finish` stops it with a
    drain (every window written) once the stream has ended."""

    def __init__(
        self,
        work: Path,
        *,
        token: str,
        registry_url: str,
        redis_url: str,
        settings: PipelineSettings,
        stream: StreamSettings,
        lineage: str,
        documents: list,
    ) -> None:
        from pipeline.flink_cluster import FlinkCluster
        from pipeline.flink_job import FlinkJobSpec, submit

        span = (documents[-1].ts - documents[0].ts).total_seconds()
        step_seconds = max(1.0, round(span * stream.step_docs / len(documents)))
        _say(
            f"starting a Flink cluster (a JobManager and two TaskManagers) and submitting the job: steps of "
            f"{step_seconds:,.0f} s of event time"
        )
        self.cluster = FlinkCluster(work, env={"TOKMAINT_REGISTRY_TOKEN": token})
        self.settings = settings.model_copy(update={"redis": redis_url, "step_seconds": step_seconds})
        self.lineage = lineage
        self.redis_url, self.registry_url = redis_url, registry_url
        self.job_id = submit(
            FlinkJobSpec(
                lineage=lineage, registry=registry_url, pipeline=self.settings, stream=stream, step_seconds=step_seconds
            ),
            master=f"127.0.0.1:{self.cluster.rest_port}",
            env=self.cluster.env(),
            log=self.cluster.log_dir / "submit.log",
        )

    def finish(self, *, timeout: float = 300.0) -> dict[str, Any]:
        """Stop the job with a drain once it has read the stream (the last windows written); what it did."""
        from pipeline.flink_job import drain
        from pipeline.redis_store import RedisStatsStore

        drain(f"127.0.0.1:{self.cluster.rest_port}", self.settings, self.lineage, timeout=timeout)
        meta = RedisStatsStore.open(redis.Redis.from_url(self.redis_url), lineage=self.lineage).meta()
        with RegistryClient(self.registry_url) as registry:
            versions = registry.version(self.lineage).number
        return {"steps": meta["step"], "documents": meta["documents"], "revisions": versions - 1}

    def close(self) -> None:
        self.cluster.stop()


def run_demo(
    out: Path, settings: DemoSettings | None = None, *, force: bool = False, progress: bool = True
) -> dict[str, Any]:
    """Run the loop; write the report to ``out``; return the summary. ``out`` follows
    ``tokenizer_service.output_dir``'s rule, checked before anything starts: a new or empty
    folder, or the report of a demo with the same settings (of other settings with ``force``)."""
    settings = settings or DemoSettings()
    from demo.report import REPORT_FILES, write_report

    report_folder = OutputDir.claim(
        out,
        command="demo",
        run=settings.model_dump(mode="json"),
        outputs=[re.escape(name) for name in REPORT_FILES],
        force=force,
    )
    started = time.perf_counter()
    corpus = read_corpus(settings.corpus)
    docs = corpus.documents
    token = secrets.token_hex(16)
    processes: list[subprocess.Popen] = []
    summary: dict[str, Any] = {}
    with report_folder, tempfile.TemporaryDirectory(prefix="tokmaint-demo-") as root_name:
        root = Path(root_name)
        try:
            use_redis = settings.redis if settings.redis is not None else shutil.which("redis-server") is not None
            _say(
                "starting a Kafka-protocol broker, "
                + ("a redis-server " if use_redis else "")
                + "and the registry (SQLite) on loopback ports"
            )
            if not use_redis:
                _say(
                    "no redis-server here: the statistics stay in this process (the in-process store; "
                    "`make demo` installs redis-server where apt can)"
                )
            broker, bootstrap = start_broker()
            processes.append(broker)
            if use_redis:
                redis_server, redis_url = start_redis()
                processes.append(redis_server)
            registry_server, registry_url = start_server(root / "registry", env={"TOKMAINT_REGISTRY_TOKEN": token})
            processes.append(registry_server)

            _say(f"training the initial tokenizer on the {settings.initial_docs:,} oldest documents")
            # <|endoftext|> starts every text the trainer reads: its bits per byte are scored from it.
            initial = BPETokenizer.train(
                [d.text for d in docs[: settings.initial_docs]],
                vocab_size=settings.vocab_size,
                special_tokens=[BOS_TOKENS[0]],
                progress=progress,
            )
            registry = RegistryClient(registry_url, token=token)
            registry.create(LINEAGE, initial.to_json())
            topics = PipelineSettings(bootstrap=bootstrap, docs_topic="docs", dlq_topic="docs.dlq")

            # The newest documents are held out: the trainer's bits per byte on the stream's future.
            held_out = docs[len(docs) - TrainerSettings().eval_docs :]
            stream = docs[settings.initial_docs : len(docs) - len(held_out)]
            held_out_file = root / "held-out.jsonl"
            held_out_file.write_text("".join(json.dumps({"text": d.text}) + "\n" for d in held_out), encoding="utf-8")
            if (settings.trainer_steps + LAST_STEPS) * TrainerSettings().batch_size > len(stream):
                raise TokmaintError(
                    f"{settings.trainer_steps} trainer steps need more than the stream's {len(stream):,} documents"
                )
            size = -(-len(stream) // settings.chunks)
            parts = [stream[k * size : (k + 1) * size] for k in range(settings.chunks)]
            chunk_files = []
            for k, part in enumerate(parts):
                path = root / f"chunk-{k:03d}.jsonl"
                path.write_text(
                    "".join(json.dumps({"ts": d.ts.isoformat(), "text": d.text}) + "\n" for d in part), encoding="utf-8"
                )
                chunk_files.append(path)
            trainer_report = root / "trainer.json"
            trainer_cmd = [
                sys.executable,
                "-m",
                "tokmaint.cli",
                *trainer_on_docs_argv(registry_url, LINEAGE, bootstrap),
                "--checkpoint-dir",
                str(root / "trainer"),
                "--report",
                str(trainer_report),
                "--eval-data",
                str(held_out_file),
                "--json",
            ]
            create_topic(bootstrap, topics.docs_topic, partitions=4)
            _say("starting the trainer (a tiny GPT-2 on CPU) on the docs topic")
            trainer_log = (root / "trainer.log").open("w")
            trainer = subprocess.Popen(
                [*trainer_cmd, "--steps", str(settings.trainer_steps)], stdout=subprocess.DEVNULL, stderr=trainer_log
            )
            processes.append(trainer)
            _wait_for_reader(root / "trainer.log", trainer)  # then it sees every version from the first
            _say(
                f"streaming {len(stream):,} documents in {settings.chunks} parts; the pipeline revises, "
                "the trainer follows"
            )
            ingest(chunk_files[0], topics, progress=False)

            job_result: dict[str, Any] = {}
            job_error: list[BaseException] = []
            # What every kind of job counts, how, and into which lineage.
            counts = {"settings": topics, "stream": settings.stream, "lineage": LINEAGE}
            if settings.engine == "flink":
                if not use_redis:
                    raise TokmaintError("--engine flink keeps the statistics in a redis-server: install one")
                job = FlinkDemoJob(
                    root / "flink",
                    token=token,
                    registry_url=registry_url,
                    redis_url=redis_url,
                    documents=stream,
                    **counts,
                )
                processes += [job.cluster.jobmanager, *job.cluster.taskmanagers]
            elif use_redis:
                job = PipelineJob(
                    redis_client=redis.Redis.from_url(redis_url),
                    registry=registry,
                    wait=2.0 * settings.pause + 1.0,
                    **counts,
                )
            else:
                job = InProcessJob(registry=registry, initial=initial, wait=2.0 * settings.pause + 1.0, **counts)

            streamed = threading.Event()

            def run_job() -> None:
                """Count what the topic holds, again and again, until the stream has ended and
                every part is counted (``run`` starts where the statistics are)."""
                try:
                    if settings.engine == "flink":  # the job runs on the cluster; it drains once streamed
                        streamed.wait()
                        job_result.update(job.finish())
                        return
                    while True:
                        ending = streamed.is_set()
                        report = job.run(until_idle=True)
                        for key in ("steps", "documents", "revisions"):
                            job_result[key] = job_result.get(key, 0) + report[key]
                        if ending:
                            return
                        time.sleep(0.2)
                except BaseException as exc:  # raised in the main thread below
                    job_error.append(exc)

            job_thread = threading.Thread(target=run_job, name="tokmaint-demo-pipeline", daemon=True)
            job_thread.start()
            arrivals = [{"chunk": 0, "time": datetime.now(timezone.utc).isoformat(), "documents": len(parts[0])}]
            for k, path in enumerate(tqdm(chunk_files[1:], desc="stream", unit="part", disable=not progress), 1):
                time.sleep(settings.pause)
                ingest(path, topics, progress=False)
                arrivals.append(
                    {"chunk": k, "time": datetime.now(timezone.utc).isoformat(), "documents": len(parts[k])}
                )
            streamed.set()
            job_thread.join()
            job.close()
            if job_error:
                raise job_error[0]
            _say(
                f"pipeline: {job_result['steps']} steps, {job_result['revisions']} revisions published; "
                "waiting for the trainer"
            )
            status = trainer.wait()
            trainer_log.close()
            if status != 0:
                raise TokmaintError(f"the trainer failed: {(root / 'trainer.log').read_text()[-2000:]}")
            first_run = json.loads(trainer_report.read_text(encoding="utf-8"))
            # A short run from the checkpoint takes the last version, if the first ended before it.
            subprocess.run(
                [*trainer_cmd, "--steps", str(settings.trainer_steps + LAST_STEPS)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            last_run = json.loads(trainer_report.read_text(encoding="utf-8"))

            def write(staging: Path) -> None:
                summary.update(
                    write_report(
                        staging,
                        registry=registry,
                        lineage=LINEAGE,
                        parts=parts,
                        arrivals=arrivals,
                        pipeline=job_result,
                        trainer=[first_run, last_run],
                        seconds=time.perf_counter() - started,
                    )
                )

            report_folder.replace_files(write)  # staged, then each file renamed over its old version
            registry.close()
        finally:
            for process in reversed(processes):
                if process.poll() is None:
                    process.terminate()
                    try:
                        process.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        process.kill()
    return summary
