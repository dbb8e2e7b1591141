"""``tokmaint bench soak``: the whole system under load while a fault schedule kills its parts.

It starts what the demo starts (a tansu broker, a ``redis-server`` keeping an append-only file,
a registry on SQLite) and the services around them as processes of their own: the ingest server,
the pipeline job, the registry's relay and a trainer on the docs topic. For ``minutes``:

* producers post the shipped stream to the ingest server in batches, a few records malformed,
  and send a batch again now and then and after every failed request (as a producer does after
  a timeout);
* clients publish, roll back and move aliases on a lineage of their own through the API, at once;
* a seeded schedule SIGKILLs the pipeline, the registry, the relay, the trainer, the ingest
  server or ``redis-server`` (restarted from its AOF) at least every ``fault_every`` seconds, and
  starts each again. The broker keeps its topics in memory only: it is never restarted;
* in the middle of the run the registry is stopped for ``registry_outage`` seconds (SIGKILL, its
  watches cut off) and started again on the same port and database, while the trainer trains
  and the pipeline has revisions to publish (no scheduled fault touches it meanwhile; the load
  goes on at least 10 s past the outage). A trainer killed by the schedule meanwhile starts
  again without the registry, from its checkpoint's copy of its version or, before its first
  checkpoint, waiting for the registry.

Then it lets the pipeline read to the topic's end and checks: every accepted document is on the
topic and counted exactly once (the lineage's count of documents, kept with its statistics in
each step's atomic write, equals the unique documents on the topic; a step counted twice after a
kill or a resend counted again would show), refused records are dead-lettered, versions are
gapless and none published twice, the trainer took the latest version and never died
(``trainer_deaths``: a trainer process that exited on its own, not 0, counted before each
scheduled kill of the trainer and at the end), no 5xx came from a server that was up, and no
process is left. That statistics equal an uninterrupted run's is the pipeline's crash test (a
topic written before the job reads it: the soak's producers pause while the ingest server is
down, longer than the reader waits for a quiet topic, and a step ends there, so a replay of the
finished topic cuts it elsewhere). Everything is seeded, and the schedule printed, so that a
failing run can be replayed.

With ``hostile`` (``bench soak --hostile``), hostile clients come too (``demo/hostile.py``): slow
readers and writers, oversized and sparse uploads, model uploads with garbage collection running
throughout in a process of its own; the report gains ``hostile`` (what they got, and every
artifact a version or model names that is missing) and ``http.starved``: a reader's requests that
were refused as overloaded or went unanswered while the registry was up. Both must be none.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis

from demo.hostile import HostileClients, write_weighty_model
from demo.run import SAMPLE, trainer_on_docs_argv
from pipeline.kafka import read_topic
from pipeline.local_servers import start_broker
from pipeline.redis_store import RedisStatsStore
from registry.client import RegistryClient, RegistryRefused
from registry.local_server import free_port
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import read_corpus
from tokenizer_service.errors import TokmaintError
from tokenizer_service.evolve import StreamSettings
from tokenizer_service.settings import Number, Settings, SettingsConfigDict, setting, share, whole

log = logging.getLogger("tokmaint.soak")
LINEAGE, API_LINEAGE = "soak", "soak-api"


def _docs_topics_argv(bootstrap: str) -> list[str]:
    """The broker, the ``docs`` topic and its dead-letter topic, as the ingest server and the
    pipeline both take them."""
    return ["--bootstrap", bootstrap, "--topic", "docs", "--dlq-topic", "docs.dlq"]


def stream_settings() -> StreamSettings:
    """The soak's stream: its pipeline's options and the replay's (over the environment's TOKMAINT_STREAM_*)."""
    return StreamSettings(step_docs=64, horizon_docs=1600, interval_docs=320, warmup_docs=640, id_price=2.0)


STREAM_OPTIONS = [
    "--step-docs",
    "64",
    "--horizon-docs",
    "1600",
    "--interval-docs",
    "320",
    "--warmup-docs",
    "640",
    "--id-price",
    "2",
]
REPLAYABLE_STEPS = 1_000_000
KILLABLE = ("pipeline", "registry", "relay", "trainer", "ingest", "redis")


class SoakSettings(Settings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_SOAK_")

    minutes: float = setting(5.0, Number(float, low=0, low_open=True), "how long the load and the faults go on")
    seed: int = setting(0, whole(0), "the seed of the load and the fault schedule")
    fault_every: float = setting(
        10.0, Number(float, low=0, low_open=True), "seconds between two faults at most (each gap is 50-100% of it)"
    )
    batch: int = setting(40, whole(1), "documents a request")
    rate: float = setting(
        0.0, Number(float, low=0), "documents a second the producer posts at most (0: as fast as the server answers)"
    )
    resend: float = setting(0.05, share(zero=True), "share of batches a producer sends again though it was answered")
    malformed: float = setting(0.02, share(zero=True), "share of records that are not documents")
    corpus: Path = setting(SAMPLE, None, "the documents' texts (default: the shipped sample)")
    initial_docs: int = setting(1000, whole(1), "oldest documents the initial tokenizer trains on")
    vocab_size: int = setting(1024, whole(257), "the initial tokenizer's vocabulary")
    logs: Path | None = setting(None, None, "copy each part's log into this folder at the end")
    registry_outage: float = setting(
        90.0,
        Number(float, low=0),
        "seconds the registry is stopped in the middle of the run, then started again on its port and "
        "database; the load goes on at least 10 s past it (0: no outage)",
    )
    hostile: bool = setting(
        False,
        None,
        "hostile clients too: slow readers and writers, oversized and sparse "
        "uploads, model uploads with garbage collection throughout, and a reader "
        "whose refused requests are counted (demo/hostile.py)",
    )


class Part:
    """One process of the system, started, killed and started again with the same arguments."""

    def __init__(
        self, name: str, argv: list[str], *, env: dict[str, str], log_path: Path, health: str | None = None
    ) -> None:
        self.name, self.argv, self.env, self.log_path, self.health = name, argv, env, log_path, health
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.lock = threading.Lock()  # held while it is killed and started again (the outage's thread too)

    def start(self, *, timeout: float = 60.0) -> None:
        with open(self.log_path, "ab") as output:
            self.process = subprocess.Popen(self.argv, env=self.env, stdout=output, stderr=subprocess.STDOUT)
        self.starts += 1
        deadline = time.monotonic() + timeout
        while self.health is not None:
            if self.process.poll() is not None:
                raise TokmaintError(f"{self.name} exited at start: {self.log_path.read_text()[-1000:]}")
            try:
                if httpx.get(self.health, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TokmaintError(f"{self.name} did not answer {self.health} in {timeout:g} s")
            time.sleep(0.1)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 30 s; the exit status (None: it was not running)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        return self.process.returncode


@dataclass
class Traffic:
    """What the clients saw: each request's status (or error) with its time, and the documents."""

    requests: list[tuple[float, str, int]] = field(default_factory=list)  # (time, server, status; 0: no answer)
    accepted: set[str] = field(default_factory=set)
    refused: int = 0
    resent_batches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw(self, server: str, status: int) -> None:
        with self.lock:
            self.requests.append((time.monotonic(), server, status))


def _produce(
    url: str,
    token: str,
    docs: list,
    settings: SoakSettings,
    traffic: Traffic,
    stop: threading.Event,
    rng: random.Random,
) -> None:
    """Post the documents in batches until ``stop`` (round and round, with new ids each round); a
    failed request is sent again, a few answered ones too."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
    batches = ((round_, start) for round_ in itertools.count() for start in range(0, len(docs), settings.batch))
    began = time.monotonic()
    with httpx.Client(timeout=30) as client:
        for sent, (round_, start) in enumerate(batches):
            # The batch's time on the schedule; behind it (a server was down), the batch goes at once.
            due = began + sent * settings.batch / settings.rate if settings.rate else 0.0
            if stop.wait(max(0.0, due - time.monotonic())):  # True once stop is set
                return
            records = []
            for k, doc in enumerate(docs[start : start + settings.batch], start):
                if rng.random() < settings.malformed:
                    records.append(json.dumps({"id": f"bad-{round_}-{k}", "text": None, "ts": doc.ts.isoformat()}))
                records.append(json.dumps({"id": f"soak-{round_}-{k}", "text": doc.text, "ts": doc.ts.isoformat()}))
            body = "\n".join(records).encode()
            sends = 2 if rng.random() < settings.resend else 1
            while sends and not stop.is_set():
                try:
                    response = client.post(f"{url}/v1/streams/docs/documents", content=body, headers=headers)
                    traffic.saw("ingest", response.status_code)
                except httpx.HTTPError:
                    traffic.saw("ingest", 0)
                    time.sleep(0.5)
                    continue
                if response.status_code != 200:
                    time.sleep(0.5)
                    continue
                answer = response.json()
                refused = {r["record"] for r in answer["refusals"]}
                with traffic.lock:
                    traffic.accepted.update(json.loads(r)["id"] for i, r in enumerate(records) if i not in refused)
                    traffic.refused += len(refused)
                    traffic.resent_batches += sends > 1
                sends -= 1
            time.sleep(0.05)


def _use_the_api(
    url: str, token: str, initial: BPETokenizer, traffic: Traffic, stop: threading.Event, rng: random.Random
) -> None:
    """Publishes, rollbacks and alias moves on a lineage of the clients' own, a request at a time."""
    with RegistryClient(url, token=token, timeout=30) as client:
        while not stop.is_set():
            try:
                latest = client.version(API_LINEAGE).number
                action = rng.choice(("rollback", "alias", "publish"))
                if action == "rollback" and latest > 1:
                    client.rollback(API_LINEAGE, rng.randint(1, latest))
                elif action == "alias":
                    client.set_alias(API_LINEAGE, "prod", rng.randint(1, latest))
                else:
                    client.publish(API_LINEAGE, initial.to_json(), kind="import")  # the latest again: no new version
                traffic.saw("registry", 200)
            except RegistryRefused as exc:
                traffic.saw("registry", exc.status)
            except (httpx.HTTPError, OSError):
                traffic.saw("registry", 0)
            time.sleep(rng.uniform(0.05, 0.3))


def outage_window(settings: SoakSettings) -> tuple[float, float] | None:
    """When the registry is stopped and when it is started again (seconds from the start of the
    load): the outage centred in the run, 5 s in at the earliest; None without one.

    >>> outage_window(SoakSettings(minutes=5)), outage_window(SoakSettings(minutes=0.5, registry_outage=35))
    ((105.0, 195.0), (5.0, 40.0))
    """
    if not settings.registry_outage:
        return None
    start = max(5.0, (settings.minutes * 60 - settings.registry_outage) / 2)
    return start, start + settings.registry_outage


def load_seconds(settings: SoakSettings) -> float:
    """How long the load goes on: ``minutes``, and at least 10 s past the registry's outage.

    >>> load_seconds(SoakSettings(minutes=5)), load_seconds(SoakSettings(minutes=0.5, registry_outage=35))
    (300.0, 50.0)
    """
    window = outage_window(settings)
    return max(settings.minutes * 60, 0.0 if window is None else window[1] + 10)


def fault_schedule(settings: SoakSettings) -> list[tuple[float, str, float]]:
    """(seconds from the start, the part to kill, seconds it stays down): seeded, printed,
    replayable. A kill of the registry due from 3 s before its outage to 1 s after it is left
    out (the outage is its fault then); the others are those of the same seed without an outage.

    >>> fault_schedule(SoakSettings(minutes=0.5, seed=1, fault_every=10.0))[0][1] in KILLABLE
    True
    """
    rng = random.Random(settings.seed)
    window = outage_window(settings)
    at, faults = 0.0, list[tuple[float, str, float]]()
    while True:
        at += settings.fault_every * rng.uniform(0.5, 1.0)
        if at >= settings.minutes * 60 - 5:
            return faults
        part, pause = rng.choice(KILLABLE), round(rng.uniform(0.2, 2.0), 2)
        if not (part == "registry" and window is not None and window[0] - 3 <= at <= window[1] + 1):
            faults.append((round(at, 2), part, pause))


class RegistryOutage(threading.Thread):
    """The registry's outage, in a thread of its own: ``at`` seconds after ``started``
    (monotonic) the registry is stopped at once (SIGKILL, its watches cut off) and, ``seconds``
    later, started again on its port and database; :attr:`stopped` and :attr:`back` (monotonic:
    it answers again) once done."""

    def __init__(self, registry: Part, *, started: float, at: float, seconds: float) -> None:
        super().__init__(name="soak-registry-outage", daemon=True)
        self.registry, self.planned, self.seconds = registry, at, seconds
        self.at = started + at
        self.stopped: float | None = None
        self.back: float | None = None

    def figures(self) -> dict[str, float] | None:
        """For the report: when it began (seconds into the load, as planned) and how long the
        registry was away (stopped until it answered again); None if it never came back."""
        if self.stopped is None or self.back is None:
            return None
        return {"at": self.planned, "seconds": round(self.back - self.stopped, 1)}

    def run(self) -> None:
        time.sleep(max(0.0, self.at - time.monotonic()))
        with self.registry.lock:  # after a scheduled kill of it under way, if any
            self.stopped = time.monotonic()
            self.registry.kill()
        log.info("soak: the registry is stopped for %.0f s", self.seconds)
        time.sleep(max(0.0, self.stopped + self.seconds - time.monotonic()))
        with self.registry.lock:
            self.registry.start()
        self.back = time.monotonic()
        log.info("soak: the registry answers again after %.1f s", self.back - self.stopped)


def _died(part: Part) -> bool:
    """Whether ``part``'s process ended on its own with a status that is not 0 (a signal too: none
    of the soak's, as it asks before each kill), said in the log."""
    status = None if part.process is None else part.process.poll()
    if status in (None, 0):
        return False
    log.warning("soak: the %s died (exit %s)", part.name, status)
    return True


def run_soak(settings: SoakSettings | None = None, *, progress: bool = False) -> dict[str, Any]:
    """Run the soak; the report (``documents``, ``versions``, ``trainer``, ``http``, ``faults``)."""
    settings = settings or SoakSettings()
    schedule = fault_schedule(settings)
    for at, name, pause in schedule:
        log.info("soak: at %6.1f s kill %-8s (down %.1f s)", at, name, pause)
    if (window := outage_window(settings)) is not None:
        log.info("soak: at %6.1f s stop the registry for %.0f s", window[0], window[1] - window[0])
    docs = read_corpus(settings.corpus).documents
    token = secrets.token_hex(16)
    env = {**os.environ, "TOKMAINT_REGISTRY_TOKEN": token, "TOKMAINT_LOG_FORMAT": "plain"}
    python = [sys.executable, "-m", "tokmaint.cli"]
    with tempfile.TemporaryDirectory(prefix="tokmaint-soak-") as root_name:
        root = Path(root_name)
        broker, bootstrap = start_broker()
        parts: dict[str, Part] = {}
        try:
            redis_port, registry_port, ingest_port = free_port(), free_port(), free_port()
            redis_url, registry_url = f"redis://127.0.0.1:{redis_port}/0", f"http://127.0.0.1:{registry_port}"
            ingest_url = f"http://127.0.0.1:{ingest_port}"
            db, artifacts = f"sqlite:///{root / 'registry.db'}", str(root / "artifacts")
            (root / "redis").mkdir()
            parts["redis"] = Part(
                "redis",
                [
                    shutil.which("redis-server") or "redis-server",
                    "--port",
                    str(redis_port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    str(root / "redis"),
                    "--save",
                    "",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                    # Redis rewrites its AOF once it doubles (each revision appends a
                    # snapshot); past 1 MB here, not 64, so that rewrites meet kills.
                    "--auto-aof-rewrite-min-size",
                    "1mb",
                ],
                env=env,
                log_path=root / "redis.log",
            )
            parts["registry"] = Part(
                "registry",
                [*python, "registry", "serve", "--port", str(registry_port), "--db", db, "--artifacts", artifacts],
                env=env,
                log_path=root / "registry.log",
                health=f"{registry_url}/healthz",
            )
            parts["ingest"] = Part(
                "ingest",
                [
                    *python,
                    "ingest-server",
                    "--port",
                    str(ingest_port),
                    *_docs_topics_argv(bootstrap),
                ],
                env=env,
                log_path=root / "ingest.log",
                health=f"{ingest_url}/healthz",
            )
            pipeline_argv = [
                *python,
                "pipeline",
                "run",
                *_docs_topics_argv(bootstrap),
                "--redis",
                redis_url,
                "--registry",
                registry_url,
                "--wait",
                "120",
                # Every id kept with the step it was counted in: the replay's steps.
                "--dedupe-steps",
                str(REPLAYABLE_STEPS),
                *STREAM_OPTIONS,
            ]
            parts["pipeline"] = Part(
                "pipeline", [*pipeline_argv, "--lineage", LINEAGE], env=env, log_path=root / "pipeline.log"
            )
            parts["relay"] = Part(
                "relay",
                [
                    *python,
                    "registry",
                    "relay",
                    "--db",
                    db,
                    "--artifacts",
                    artifacts,
                    "--bootstrap",
                    bootstrap,
                    "--interval",
                    "0.2",
                ],
                env=env,
                log_path=root / "relay.log",
            )
            parts["trainer"] = Part(
                "trainer",
                [
                    *python,
                    *trainer_on_docs_argv(registry_url, LINEAGE, bootstrap),
                    "--follow",
                    "events",
                    "--steps",
                    "100000",
                    "--checkpoint-dir",
                    str(root / "trainer"),
                    "--batch-size",
                    "4",
                    "--checkpoint-every",
                    "10",
                ],
                env=env,
                log_path=root / "trainer.log",
            )
            for name in ("redis", "registry", "ingest"):
                parts[name].start()
            initial = BPETokenizer.train(
                [d.text for d in docs[: settings.initial_docs]], vocab_size=settings.vocab_size
            )
            with RegistryClient(registry_url, token=token) as client:
                for name in (LINEAGE, API_LINEAGE):
                    client.create(name, initial.to_json())
            hostile = None
            if settings.hostile:
                hostile = HostileClients(
                    registry_url=registry_url,
                    ingest_url=ingest_url,
                    token=token,
                    lineage=API_LINEAGE,
                    read_lineage=LINEAGE,
                    db=db,
                    artifacts=artifacts,
                    model=write_weighty_model(initial, API_LINEAGE, 1, root / "model"),
                )
                hostile.start(python=sys.executable, env=env)
            traffic, stop, rng = Traffic(), threading.Event(), random.Random(settings.seed)
            stream = docs[settings.initial_docs :]
            producer = threading.Thread(
                target=_produce,
                args=(ingest_url, token, stream, settings, traffic, stop, random.Random(rng.random())),
                daemon=True,
            )
            producer.start()
            time.sleep(1.0)  # the topic exists once the first batch is in
            for name in ("pipeline", "relay", "trainer"):
                parts[name].start()
            api = [
                threading.Thread(
                    target=_use_the_api,
                    args=(registry_url, token, initial, traffic, stop, random.Random(rng.random())),
                    daemon=True,
                )
                for _ in range(3)
            ]
            for thread in api:
                thread.start()
            started, down = time.monotonic(), []
            outage = None
            if window is not None:
                outage = RegistryOutage(parts["registry"], started=started, at=window[0], seconds=window[1] - window[0])
                outage.start()
            trainer_deaths = 0
            for at, name, pause in schedule:
                time.sleep(max(0.0, started + at - time.monotonic()))
                if name == "trainer":
                    trainer_deaths += _died(parts["trainer"])
                with parts[name].lock:
                    killed = time.monotonic()
                    parts[name].kill()
                    time.sleep(pause)
                    parts[name].start()
                down.append((name, killed, time.monotonic()))
                if progress:
                    log.info("soak: %5.1f s: killed and restarted %s", killed - started, name)
            time.sleep(max(0.0, started + load_seconds(settings) - time.monotonic()))
            if outage is not None:
                outage.join(timeout=120)
                if outage.stopped is not None and outage.back is not None:
                    down.append(("registry", outage.stopped, outage.back))
            stop.set()
            if hostile is not None:
                hostile.stop()
            producer.join(timeout=60)
            for thread in api:
                thread.join(timeout=60)
            unexpected = {
                name: part.process.returncode
                for name, part in parts.items()
                if part.process is not None and part.process.poll() is not None
            }
            parts["pipeline"].stop()
            last_run = [*pipeline_argv, "--lineage", LINEAGE, "--until-idle", "--json"]
            finish = subprocess.run(last_run, env=env, capture_output=True, text=True, timeout=1800)
            if finish.returncode:
                raise TokmaintError(f"the pipeline's last run failed: {finish.stderr[-1500:]}")
            _wait_for_the_trainer(root / "trainer" / "checkpoint.pt", registry_url)
            trainer_deaths += _died(parts["trainer"])
            report = _check(
                settings,
                traffic,
                redis_url,
                registry_url,
                bootstrap,
                root / "trainer" / "checkpoint.pt",
                down,
                schedule,
                unexpected,
                None if outage is None else outage.figures(),
            )
            report["trainer"]["resumes"] = parts["trainer"].starts - 1
            report["trainer_deaths"] = trainer_deaths
            report["redis"] = _redis_files(redis_url, root / "redis")
            if hostile is not None:
                report["hostile"] = hostile.report(down=[(a, b) for n, a, b in down if n == "registry"])
                report["http"]["starved"] = report["hostile"].pop("starved")
            report["statistics"] = _replayed(
                initial, redis_url, versions=report.pop("version_shas"), documents=report.pop("texts")
            )
        finally:
            for part in parts.values():
                part.stop()
            broker.terminate()
            broker.wait(timeout=30)
            if settings.logs is not None:
                settings.logs.mkdir(parents=True, exist_ok=True)
                for path in root.glob("*.log"):
                    shutil.copy(path, settings.logs / path.name)
        report["processes_left"] = [
            name for name, part in parts.items() if part.process is not None and part.process.poll() is None
        ]
        return report


def _replayed(
    initial: BPETokenizer, redis_url: str, *, versions: list[str], documents: dict[str, str]
) -> dict[str, Any]:
    """Ted-Tok run offline, uninterrupted, over the steps the pipeline counted (each document
    in the step Redis keeps its id with): whether its statistics and versions are the lineage's."""
    from tokenizer_service.stats_store import MemoryStatsStore
    from tokenizer_service.tedtok import TedTok

    store = RedisStatsStore.open(redis.Redis.from_url(redis_url), lineage=LINEAGE)
    steps: dict[int, list[str]] = {}
    for doc_id, step in store.recent_ids().items():
        steps.setdefault(step, []).append(documents[doc_id])
    config = stream_settings().tedtok_config()
    replay = TedTok(initial, config=config, store=MemoryStatsStore(alpha=config.alpha), lineage=LINEAGE)
    for step in range(1, store.meta()["step"] + 1):
        replay.observe_texts(steps.get(step, []))
    ids = np.arange(max(replay.tokenizer.id_space, initial.id_space))
    keys, values = replay.store.top_pairs(replay.store.tracked_pairs)
    live_keys, live_values = store.top_pairs(replay.store.tracked_pairs)
    same_pairs = set(keys.tolist()) == set(live_keys.tolist()) and np.allclose(
        np.sort(values), np.sort(live_values), rtol=1e-9, atol=1e-12
    )
    return {
        "steps": len(steps),
        "revisions": len(replay.revisions),
        "versions_equal": [r.tokenizer.sha256 for r in replay.revisions] == versions[1:],
        "tokens_equal": bool(np.allclose(store.token(ids), replay.store.token(ids), rtol=1e-9, atol=1e-12)),
        "pairs_equal": bool(same_pairs),
    }


def _redis_files(redis_url: str, folder: Path) -> dict[str, float]:
    """The AOF's size on disk against the data it keeps: Redis's own rewrites bound it (each
    revision's snapshot is appended whole, and a rewrite keeps the last)."""
    info = redis.Redis.from_url(redis_url).info()
    # All that Redis keeps there (no RDB snapshots: --save ""): Redis 7's AOF is a folder of a base
    # (RDB-encoded after a rewrite), increments and a manifest.
    files = [p for p in folder.rglob("*") if p.is_file()]
    return {
        "aof_mb": round(sum(p.stat().st_size for p in files) / 1e6, 2),
        "dataset_mb": round(info["used_memory_dataset"] / 1e6, 2),
        "aof_rewrites": info["aof_rewrites"],
    }


def _wait_for_the_trainer(checkpoint: Path, registry_url: str, *, timeout: float = 120.0) -> None:
    """Until the trainer's checkpoint holds the latest version (the relay sends its event, the
    trainer takes it between two steps and checkpoints), or ``timeout``: the check says which."""
    import torch

    with RegistryClient(registry_url) as registry:
        latest = registry.version(LINEAGE).number
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if torch.load(checkpoint, weights_only=True)["tokenizer"]["version"] == latest:
                return
        except (OSError, RuntimeError, KeyError):  # not written yet, or being replaced
            pass
        time.sleep(1.0)


def _check(
    settings: SoakSettings,
    traffic: Traffic,
    redis_url: str,
    registry_url: str,
    bootstrap: str,
    checkpoint: Path,
    down: list[tuple[str, float, float]],
    schedule: list[tuple[float, str, float]],
    unexpected: dict[str, int],
    outage: dict[str, float] | None,
) -> dict[str, Any]:
    """The end-of-run checks as a report; ``outage``: the registry's (when it began, seconds into
    the load, and how long it was away until it answered again)."""
    import torch

    # Every producer has stopped and the pipeline has finished: a second with nothing new is the end.
    on_topic = {topic: read_topic(bootstrap, topic, quiet_ms=1000) for topic in ("docs", "docs.dlq")}
    docs = [json.loads(r.value) for r in on_topic["docs"]]
    ids = [doc["id"] for doc in docs]
    lost = traffic.accepted - set(ids)
    counted = RedisStatsStore.open(redis.Redis.from_url(redis_url), lineage=LINEAGE).meta()["documents"]
    unique = len(set(ids))
    with RegistryClient(registry_url) as registry:
        versions = registry.versions(LINEAGE, limit=1000).data
    numbers = [v.number for v in versions]
    shas = [v.sha256 for v in versions]
    stamp = torch.load(checkpoint, weights_only=True)["tokenizer"] if checkpoint.is_file() else {}
    while_down = {
        "ingest": [(a, b) for n, a, b in down if n == "ingest"],
        "registry": [(a, b) for n, a, b in down if n == "registry"],
    }
    errors = [(at, server, status) for at, server, status in traffic.requests if status >= 500]
    unexplained = [e for e in errors if not any(a <= e[0] <= b + 1.0 for a, b in while_down[e[1]])]
    return {
        "minutes": settings.minutes,
        "load_seconds": load_seconds(settings),
        "seed": settings.seed,
        "documents": {
            "accepted": len(traffic.accepted),
            "on_topic": unique,
            "resent": len(ids) - unique,
            "counted": counted,
            "dead_lettered": len(on_topic["docs.dlq"]),
            "refused": traffic.refused,
            "lost": len(lost) + max(0, unique - counted),
            "duplicated": max(0, counted - unique),
        },
        "versions": {
            "published": len(versions),
            "gaps": len(set(range(1, max(numbers) + 1)) - set(numbers)),
            "duplicates": sum(a == b for a, b in zip(shas, shas[1:])),
        },
        "trainer": {
            "version": stamp.get("version"),
            "latest": max(numbers),
            "versions_taken": stamp.get("version") == max(numbers),
        },
        "http": {
            "requests": len(traffic.requests),
            "server_errors": len(errors),
            "unexplained_server_errors": len(unexplained),
            "no_answer": sum(status == 0 for _, _, status in traffic.requests),
        },
        "faults": {
            "injected": len(schedule),
            "by_part": {p: sum(n == p for _, n, _ in schedule) for p in KILLABLE},
            "schedule": schedule,
            "registry_outage": outage,
            "broker": "not restarted: tansu keeps topics in memory only",
        },
        "exited_on_their_own": unexpected,
        "version_shas": shas,
        "texts": {doc["id"]: doc["text"] for doc in docs},
    }
