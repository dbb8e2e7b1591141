"""``make compose-smoke``: docker-compose.yml run for real, with the stand-in images
(``containers/compose.standins.yml``), and a crash in the middle of the stream.

Run A: ``up --wait``; the shipped git sample posted to the ingest server; the pipeline counts it
all and publishes versions; the trainer applies them; the registry's page and ``/metrics``
answer. Run B, a project of its own: the same, but the pipeline's container is killed once three
versions are out, and ``up`` starts it again. Both end with the lineage's versions and the Redis
statistics of every step. Each must equal the offline replay of its own docs topic
(``matches_replay``): Ted-Tok run uninterrupted, in a container of the project's network, over
the complete steps ``pipeline.stream.topic_steps`` reads from the finished topic, from the
lineage's version 1; a step is a function of the topic alone, whenever the job read it. The
pipeline runs live (not told the stream ends), so it leaves the last step, short of
``step_docs``, for more documents: that step is neither counted nor replayed
(``documents_waiting``). And B's must equal A's (``restart_identical``). Each project is taken
down with its volumes. The last line printed is one JSON object: ``versions``,
``trainer_applied``, ``restart_identical``, ``matches_replay``, ``seconds`` (and what they rest
on: ``documents`` posted, ``documents_waiting``, ``steps``, ...).

    DOCKER_HOST=... .venv/bin/python containers/compose_smoke.py
"""

from __future__ import annotations

import gzip
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import redis

from pipeline.redis_store import RedisStatsStore
from registry.client import RegistryClient
from schemas.registry_api import VersionPublic
from tokenizer_service.errors import TokmaintError

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "git-commits-sample.jsonl.gz"
LINEAGE = "news"
COMPOSE = [
    str(
        Path(sys.prefix)
        / "lib"
        / f"python{sys.version_info.major}.{sys.version_info.minor}"
        / "site-packages"
        / "compose"
        / "docker-compose"
    ),
    "-f",
    str(ROOT / "docker-compose.yml"),
    "-f",
    str(ROOT / "containers" / "compose.standins.yml"),
]
# --engine flink: the pipeline as a job on a Flink cluster of the project image (docker-compose.flink.yml).
FLINK = ["-f", str(ROOT / "docker-compose.flink.yml"), "-f", str(ROOT / "containers" / "compose.flink-standins.yml")]


# Run with the image's Python in a container of the project (its network, its environment): the
# offline replay of the docs topic's complete steps (those the live pipeline counts), as JSON on
# stdout's last line.
REPLAY = """
import json, os
import numpy as np
from pipeline.stream import topic_steps
from pipeline.config import PipelineSettings
from registry.client import RegistryClient
from tokenizer_service.evolve import StreamSettings
from tokenizer_service.stats_store import MemoryStatsStore
from tokenizer_service.tedtok import TedTok

lineage, stream = os.environ["TOKMAINT_LINEAGE"], StreamSettings()
initial = RegistryClient(os.environ["TOKMAINT_REGISTRY_URL"]).tokenizer(lineage, 1)
config = stream.tedtok_config()
replay = TedTok(initial, config=config, store=MemoryStatsStore(alpha=config.alpha), lineage=lineage)
steps = documents = 0
for step in topic_steps(PipelineSettings(), stream.step_docs, complete_only=True):
    if step.documents:  # a step of dead records alone is none (as the job counts them)
        replay.observe_texts([d.text for d in step.documents])
        steps, documents = steps + 1, documents + len(step.documents)
ids = np.sort(np.fromiter(replay.tokenizer.vocab.values(), np.int64))
keys, values = replay.store.top_pairs(500)
print(json.dumps({"versions": [initial.sha256] + [r.tokenizer.sha256 for r in replay.revisions], "step": steps,
                  "documents": documents, "tokens": replay.store.token(ids).tolist(),
                  "pairs": [[int(k), float(v)] for k, v in zip(keys, values)]}))
"""


# The Flink job's replay: Ted-Tok over the finished topic's windows of event time (the job's steps,
# resends dropped), as JSON on stdout's last line; the job was drained, so every window counts.
REPLAY_FLINK = """
import json, os
import numpy as np
from pipeline.flink_bench import replay
from pipeline.kafka import read_topic
from pipeline.config import PipelineSettings
from registry.client import RegistryClient
from tokenizer_service.evolve import StreamSettings

lineage, stream, settings = os.environ["TOKMAINT_LINEAGE"], StreamSettings(), PipelineSettings()
initial = RegistryClient(os.environ["TOKMAINT_REGISTRY_URL"]).tokenizer(lineage, 1)
records = [r.value for r in read_topic(settings.bootstrap, settings.docs_topic)]
tedtok, steps = replay(records, initial, stream, step_seconds=float(os.environ["TOKMAINT_FLINK_STEP_SECONDS"]))
ids = np.sort(np.fromiter(tedtok.tokenizer.vocab.values(), np.int64))
keys, values = tedtok.store.top_pairs(500)
print(json.dumps({"versions": [initial.sha256] + [r.tokenizer.sha256 for r in tedtok.revisions], "step": len(steps),
                  "documents": sum(n for n, _ in steps.values()), "tokens": tedtok.store.token(ids).tolist(),
                  "pairs": [[int(k), float(v)] for k, v in zip(keys, values)]}))
"""
STEP_SECONDS = 30 * 86400  # the Flink job's steps: 30 days of the sample's event time
# The sample is in git's order, not time order: a commit comes up to 1,211 days after a later one.
# The job's lateness bound covers that, so no document is late and each window is the topic's.
MAX_LATENESS_SECONDS = 1300 * 86400


class Project:
    """One compose project: its name, its ports on loopback, its secrets."""

    def __init__(self, name: str, offset: int, *, engine: str = "local") -> None:
        self.name, self.engine = name, engine
        self.files = COMPOSE + (FLINK if engine == "flink" else [])
        self.env = {
            **os.environ,
            "POSTGRES_PASSWORD": secrets.token_hex(8),
            "TOKMAINT_REGISTRY_TOKEN": secrets.token_hex(16),
            "TOKMAINT_LINEAGE": LINEAGE,
            "TOKMAINT_REGISTRY_PORT": str(18000 + offset),
            "TOKMAINT_INGEST_PORT": str(18100 + offset),
            "TOKMAINT_REDIS_PORT": str(16379 + offset),
            "TOKMAINT_FLINK_PORT": str(18081 + offset),
            "TOKMAINT_FLINK_STEP_SECONDS": str(STEP_SECONDS),
            "TOKMAINT_FLINK_MAX_LATENESS_SECONDS": str(MAX_LATENESS_SECONDS),
        }
        self.registry = f"http://127.0.0.1:{18000 + offset}"
        self.ingest = f"http://127.0.0.1:{18100 + offset}"
        self.redis = f"redis://127.0.0.1:{16379 + offset}/0"

    def compose(self, *args: str, capture: bool = False) -> str:
        done = subprocess.run(
            [*self.files, "-p", self.name, *args], env=self.env, text=True, capture_output=True, timeout=600
        )
        if done.returncode:
            raise TokmaintError(f"docker compose {' '.join(args)}: {done.stderr.strip()[-2000:]}")
        return done.stdout if capture else ""

    def post_sample(self) -> int:
        """The sample, 500 documents a request, onto the docs topic; how many were accepted."""
        lines = gzip.open(SAMPLE, "rb").read().splitlines()
        accepted = 0
        with httpx.Client(timeout=120) as client:
            for k in range(0, len(lines), 500):
                answer = client.post(
                    f"{self.ingest}/v1/streams/docs/documents",
                    content=b"\n".join(lines[k : k + 500]),
                    headers={
                        "Authorization": f"Bearer {self.env['TOKMAINT_REGISTRY_TOKEN']}",
                        "Content-Type": "application/x-ndjson",
                    },
                )
                answer.raise_for_status()
                accepted += answer.json()["accepted"]
        return accepted

    def versions(self) -> list[VersionPublic]:
        return RegistryClient(self.registry).versions(LINEAGE, limit=1000).data

    def store(self) -> RedisStatsStore:
        return RedisStatsStore.open(redis.Redis.from_url(self.redis), lineage=LINEAGE)

    def counted(self, documents: int, *, timeout: float = 600) -> dict:
        """Wait until the pipeline has counted ``documents`` (those of the complete steps) and
        applied its last step; its meta."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                meta = self.store().meta()
                if meta["documents"] >= documents and self.store().pending() is None:
                    return meta
            except (redis.RedisError, TokmaintError, KeyError, ValueError):
                pass  # not up yet, or no step written yet
            time.sleep(2)
        raise TokmaintError(f"{self.name}: the pipeline did not count {documents} documents within {timeout:.0f} s")

    def statistics(self) -> dict:
        """What must be equal after a crash: the versions and the statistics of every step."""
        versions = self.versions()
        store = self.store()
        tokenizer = RegistryClient(self.registry).tokenizer(LINEAGE, versions[-1].number)
        ids = np.sort(np.fromiter(tokenizer.vocab.values(), np.int64))  # by id, as the replay has them
        keys, values = store.top_pairs(500)
        meta = store.meta()
        return {
            "versions": [v.sha256 for v in versions],
            "step": meta["step"],
            "documents": meta["documents"],
            "tokens": store.token(ids),
            "pairs": dict(zip(np.asarray(keys).tolist(), np.asarray(values).tolist())),
        }

    def replay(self) -> dict:
        """The offline replay of the project's docs topic's complete steps (``REPLAY``), as
        ``statistics`` has a run."""
        service, script = ("pipeline-flink", REPLAY_FLINK) if self.engine == "flink" else ("pipeline", REPLAY)
        out = self.compose(
            "run", "--rm", "--no-deps", "-T", "--entrypoint", "python", service, "-c", script, capture=True
        )
        replayed = json.loads(out.strip().splitlines()[-1])
        return {**replayed, "tokens": np.array(replayed["tokens"]), "pairs": dict(map(tuple, replayed["pairs"]))}

    def drain(self) -> None:
        """The Flink job stopped with a drain once it has read the whole topic: every window written."""
        try:
            self.compose(
                "run",
                "--rm",
                "--no-deps",
                "-T",
                "pipeline-flink",
                "pipeline",
                "flink",
                "--lineage",
                LINEAGE,
                "--flink-master",
                "flink-jobmanager:8081",
                "--drain",
            )
        except TokmaintError:  # what the submission and the cluster said
            print(
                self.compose(
                    "logs", "--tail", "40", "pipeline-flink", "flink-jobmanager", "flink-taskmanager", capture=True
                ),
                file=sys.stderr,
            )
            raise

    def trainer_following(self, *, timeout: float = 300) -> None:
        """Wait until the trainer has said it trains (and follows the lineage's versions)."""
        deadline = time.monotonic() + timeout
        while "trainer: training" not in self.compose("logs", "trainer", capture=True):
            if time.monotonic() > deadline:
                raise TokmaintError(
                    f"{self.name}: the trainer did not start within {timeout:.0f} s: "
                    f"{self.compose('logs', '--tail', '20', 'trainer', capture=True)}"
                )
            time.sleep(1)

    def trainer_applied(self) -> int:
        """The versions the trainer has applied to its model (its log says each)."""
        return self.compose("logs", "trainer", capture=True).count("trainer: took version")


def differences(a: dict, b: dict) -> list[str]:
    """How two runs' (or a run's and a replay's) versions and statistics differ; none when equal."""
    found = []
    if a["versions"] != b["versions"]:
        first = next(
            (k for k, (x, y) in enumerate(zip(a["versions"], b["versions"])) if x != y),
            min(len(a["versions"]), len(b["versions"])),
        )
        found.append(f"versions: {len(a['versions'])} and {len(b['versions'])}, apart from version {first + 1}")
    if (a["step"], a["documents"]) != (b["step"], b["documents"]):
        found.append(f"steps and documents: {a['step']}, {a['documents']} and {b['step']}, {b['documents']}")
    elif len(a["tokens"]) != len(b["tokens"]) or not np.allclose(a["tokens"], b["tokens"], rtol=1e-9, atol=1e-12):
        found.append("token statistics")
    if a["pairs"].keys() != b["pairs"].keys() or not np.allclose(
        [a["pairs"][k] for k in a["pairs"]], [b["pairs"][k] for k in a["pairs"]], rtol=1e-9
    ):
        found.append("the top 500 pairs")
    return found


def same(a: dict, b: dict, *, what: str) -> bool:
    """True when ``a`` and ``b`` are equal; else False, having said how they differ (stderr)."""
    for difference in (found := differences(a, b)):
        print(f"compose-smoke: {what}: {difference} differ", file=sys.stderr)
    return not found


def run(project: Project, *, crash: bool) -> tuple[dict, int, int]:
    """Up, the sample posted (the pipeline killed and started again mid-stream with ``crash``:
    the statistics say how far it had counted, ``killed_at``), every complete step counted; the
    statistics (with ``documents_waiting``: posted, in the last step, not complete, and not
    counted), the trainer's versions applied, the documents posted."""
    project.compose("up", "-d", "--wait")
    if project.engine == "flink":  # submitted once its one-off has exited (0): a drain before would find no job
        project.compose("wait", "pipeline-flink")
    for path in ("/", "/metrics"):
        httpx.get(f"{project.registry}{path}", timeout=10).raise_for_status()
    # The trainer starts at the latest version: posted before it follows, the stream's versions
    # could all be out by then, and it would have none to take.
    project.trainer_following()
    posted = project.post_sample()
    if crash:
        deadline = time.monotonic() + 300
        while len(project.versions()) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        # Flink: the TaskManager (the job restores from its last checkpoint once it is back).
        project.compose("kill", "flink-taskmanager" if project.engine == "flink" else "pipeline")
        killed_at = project.store().meta()["documents"]
        project.compose("up", "-d", "--wait")
    if project.engine == "flink":  # a live job leaves its last windows open until the watermark passes them
        project.drain()
    replayed = project.replay()  # the finished topic's complete steps: what the live pipeline counts
    project.counted(replayed["documents"])
    # The trainer takes the newest version between two steps (one composed diff for all it missed).
    deadline = time.monotonic() + 300
    while not (applied := project.trainer_applied()) and time.monotonic() < deadline:
        time.sleep(2)
    if not applied:  # what the trainer said, for the report (it took no version)
        print(project.compose("logs", "--tail", "20", "trainer", capture=True), file=sys.stderr)
    statistics = project.statistics()
    statistics["matches_replay"] = same(statistics, replayed, what=f"{project.name} and the replay of its topic")
    statistics["documents_waiting"] = posted - replayed["documents"]
    return {**statistics, **({"killed_at": killed_at} if crash else {})}, applied, posted


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--engine",
        choices=["local", "flink"],
        default="local",
        help="the pipeline: one process (pipeline run), or a job on Flink containers",
    )
    engine = parser.parse_args().engine
    started = time.perf_counter()
    a, b = Project("tokmaint-smoke-a", 0, engine=engine), Project("tokmaint-smoke-b", 1, engine=engine)
    try:
        plain, applied, posted = run(a, crash=False)
    finally:
        a.compose("down", "-v", "--remove-orphans")
    try:
        crashed, _, _ = run(b, crash=True)
    finally:
        b.compose("down", "-v", "--remove-orphans")
    result = {
        "engine": engine,
        "versions": len(plain["versions"]),
        "trainer_applied": applied,
        "restart_identical": same(plain, crashed, what="the uninterrupted and the restarted run"),
        "matches_replay": plain["matches_replay"] and crashed["matches_replay"],
        "seconds": round(time.perf_counter() - started, 1),
        "documents": posted,
        "steps": plain["step"],
        "documents_waiting": plain["documents_waiting"],
        "versions_after_restart": len(crashed["versions"]),
        "killed_after_documents": crashed["killed_at"],
    }
    print(json.dumps(result))
    return (
        0
        if (result["versions"] >= 2 and applied >= 1 and result["restart_identical"] and result["matches_replay"])
        else 1
    )


if __name__ == "__main__":
    sys.exit(main())
