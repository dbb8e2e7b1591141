"""``tokmaint bench pipeline``: end-to-end MB/s from Kafka through counting to Redis, against raw
``tokenizers`` encoding of the same text in the same run, and the per-step state update time
with a small and a large pair table.

It starts its own broker, redis-server and registry (temporary), trains the initial tokenizer on
the oldest ``init_share`` of the corpus's first ``max_mb``, ingests those documents, and runs the
job for the steps they make (``pipeline_mb_s``: the documents' UTF-8 megabytes over the job's
wall time, reading, decoding, counting, Redis writes and revisions included; ``revision_seconds``
the revisions' share). The job stops after its last step, as one given ``--max-steps`` does, not
after one more fetch that finds the topic idle (``until_idle``): that waits for records that will
not come, no part of processing the stream. The stream has a production shape by default (``PipelineBenchSettings``);
``--step-docs 64 --interval-docs 640 --horizon-docs 6400`` is evolve's. ``encode_mb_s`` is
``encode_batch`` of the same texts with the initial tokenizer, timed before and after each run
(the machine's speed drifts; once more before, untimed, to warm it up). The job runs
``repeats`` times over the whole stream, each run a lineage of its own from the topic's start:
one run of a small corpus lasts under a second, and runs minutes apart differ by ±15% on a
shared machine. The top-level figures are the median run's (by ratio); ``runs`` lists every
run's. ``step_seconds``: the median time of one step's Redis update (a real step's counts) with
the pair table filled to 10k and to 1M; ``read_seconds``: after those steps, a new reader's
ranking of the top pairs (the snapshot and the steps' log folded: what a step leaves for a
revision to do).
"""

from __future__ import annotations

import json
import math
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import redis

from pipeline.ingest import ingest
from pipeline.job import PipelineJob
from pipeline.local_servers import start_stream_servers
from pipeline.redis_store import RedisStatsStore
from pipeline.config import PipelineSettings
from registry.client import RegistryClient
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import oldest, read_corpus
from tokenizer_service.counting import KeyCounts, StepCounter, pack_pair
from tokenizer_service.errors import TokmaintError
from tokenizer_service.evolve import StreamSettings
from tokenizer_service.settings import Number, Settings, SettingsConfigDict, setting, share, whole
from tokenizer_service.tokenizer_json import MAX_ID_SPACE

TOP_PAIRS = 4 * 100 + 64  # what a revision with Ted-Tok's default batch ranks


class CorpusStreamSettings(Settings):
    """What a benchmark that streams a corpus takes of it (``bench pipeline``'s, ``bench flink``'s)."""

    max_mb: float = setting(10.0, Number(float, low=0, low_open=True), "megabytes of the corpus to stream")
    vocab_size: int = setting(4096, whole(257, MAX_ID_SPACE), "vocabulary of the initial tokenizer")
    init_share: float = setting(
        0.2, share(one=False), "share of the oldest documents the initial tokenizer is trained on"
    )


class PipelineBenchSettings(CorpusStreamSettings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_PIPELINE_")

    # A stream's shape in production, not evolve's replay of a small corpus: steps of 1,024
    # documents, a revision every 16 steps, statistics that remember 64 steps.
    step_docs: int = setting(1024, whole(1), "documents per time step")
    interval_docs: int = setting(16384, whole(1), "documents between revisions (the first after as many)")
    horizon_docs: int = setting(65536, whole(1), "documents the statistics remember")
    commit_steps: int = setting(16, whole(1), "steps counted between writes to Redis, at most")
    step_repeats: int = setting(
        40, whole(1), "timed step updates per table size, taking turns (the median is reported)"
    )
    repeats: int = setting(
        5, whole(1), "runs of the job over the whole stream, each a lineage of its own (the median run is reported)"
    )


def _step_seconds(
    client: redis.Redis, counts, tables: dict[str, int], repeats: int
) -> tuple[dict[str, float], dict[str, float]]:
    """The median time of one step's update with each pair table (name → pairs) filled first
    (and folded into a snapshot); the tables take turns, so that a drift in the machine's speed
    weighs on all alike. Also, by table, the time a new reader (``tokmaint revise``) takes to
    rank the top pairs: the snapshot and the steps' log folded, the cost the steps leave to it."""
    stores = {}
    rng = np.random.default_rng(0)
    for name, pairs in tables.items():
        store = stores[name] = RedisStatsStore(client, lineage=f"bench-{secrets.token_hex(4)}", alpha=0.01)
        for start in range(0, pairs, 50_000):
            n = min(50_000, pairs - start)
            keys = np.unique(pack_pair(rng.integers(0, 1 << 21, n), rng.integers(0, 1 << 21, n)))
            store.apply_counts(KeyCounts(np.zeros(0, np.int64), np.zeros(0), keys, np.ones(len(keys))))
        store.compact()
    times: dict[str, list[float]] = {name: [] for name in tables}
    for _ in range(repeats):
        for name, store in stores.items():
            started = time.perf_counter()
            store.apply_counts(counts)
            times[name].append(time.perf_counter() - started)
    reads = {}
    for name, store in stores.items():
        started = time.perf_counter()
        RedisStatsStore.open(client, lineage=store.lineage).top_pairs(TOP_PAIRS)
        reads[name] = time.perf_counter() - started
    return {name: statistics.median(values) for name, values in times.items()}, reads


def _encode_seconds(tokenizer: BPETokenizer, texts: list[str]) -> float:
    """The time ``tokenizers`` takes to encode the texts (``encode_batch``, all cores)."""
    started = time.perf_counter()
    tokenizer.hf.encode_batch(texts, add_special_tokens=False)
    return time.perf_counter() - started


def run_pipeline_bench(
    corpus: str | Path, settings: PipelineBenchSettings | None = None, *, progress: bool = True
) -> dict[str, Any]:
    settings = settings or PipelineBenchSettings()
    docs = oldest(read_corpus(corpus, progress=progress), settings.max_mb)
    texts = [d.text for d in docs]
    initial = BPETokenizer.train(
        texts[: max(1, round(settings.init_share * len(texts)))], vocab_size=settings.vocab_size, progress=progress
    )
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    # Once untimed: the first call also starts tokenizers' thread pool and fills its word cache
    # (5-10% slower), which would flatter the first run's ratio.
    _encode_seconds(initial, texts)
    encode_seconds = [_encode_seconds(initial, texts)]

    token = secrets.token_hex(16)
    runs = []
    with tempfile.TemporaryDirectory(prefix="tokmaint-bench-pipeline-") as root:
        stream_file = Path(root) / "stream.jsonl"
        stream_file.write_text(
            "".join(
                json.dumps({"ts": d.ts.isoformat(), "text": d.text}) + "\n"
                if d.ts
                else json.dumps({"text": d.text}) + "\n"
                for d in docs
            ),
            encoding="utf-8",
        )
        servers, bootstrap, redis_url, registry_url = start_stream_servers(Path(root), token=token)
        try:
            pipeline = PipelineSettings(
                bootstrap=bootstrap, docs_topic="docs", dlq_topic="docs.dlq", commit_steps=settings.commit_steps
            )
            stream = StreamSettings(
                step_docs=settings.step_docs,
                interval_docs=settings.interval_docs,
                horizon_docs=max(settings.horizon_docs, settings.step_docs),
                warmup_docs=settings.interval_docs,
            )
            ingest(stream_file, pipeline, progress=progress)
            client = redis.Redis.from_url(redis_url)
            with RegistryClient(registry_url, token=token) as registry:
                for number in range(1, settings.repeats + 1):
                    report = _run_job(
                        registry,
                        client,
                        pipeline,
                        stream,
                        initial,
                        lineage=f"bench-{number}",
                        steps=math.ceil(len(docs) / settings.step_docs),
                        documents=len(docs),
                    )
                    encode_seconds.append(_encode_seconds(initial, texts))
                    encode_mb_s = 2 * megabytes / (encode_seconds[-2] + encode_seconds[-1])
                    pipeline_mb_s = megabytes / report["seconds"]
                    runs.append(
                        {
                            "ratio": pipeline_mb_s / encode_mb_s,
                            "encode_mb_s": encode_mb_s,
                            "pipeline_mb_s": pipeline_mb_s,
                            "seconds": report["seconds"],
                            "revisions": report["revisions"],
                            "revision_seconds": report["revision_seconds"],
                            "documents": report["documents"],
                            "steps": report["steps"],
                        }
                    )
            counts = StepCounter(initial).count_texts(texts[: settings.step_docs])
            step_seconds, read_seconds = _step_seconds(
                client, counts, {"pairs_10k": 10_000, "pairs_1m": 1_000_000}, settings.step_repeats
            )
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=30)
    median = statistics.median_low(run["ratio"] for run in runs)
    chosen = next(run for run in runs if run["ratio"] == median)
    return {
        "encode_mb_s": chosen["encode_mb_s"],
        "pipeline_mb_s": chosen["pipeline_mb_s"],
        "ratio": chosen["ratio"],
        "step_seconds": step_seconds,
        "read_seconds": read_seconds,
        "megabytes": megabytes,
        "documents": chosen["documents"],
        "steps": chosen["steps"],
        "revisions": chosen["revisions"],
        "revision_seconds": chosen["revision_seconds"],
        "runs": runs,
        "vocab_size": len(initial),
        "step_docs": settings.step_docs,
        "interval_docs": settings.interval_docs,
        "commit_steps": settings.commit_steps,
    }


def _run_job(
    registry: RegistryClient,
    client: redis.Redis,
    pipeline: PipelineSettings,
    stream: StreamSettings,
    initial: BPETokenizer,
    *,
    lineage: str,
    steps: int,
    documents: int,
) -> dict[str, Any]:
    """One run of the job over the whole topic, as a new lineage: its report."""
    registry.create(lineage, initial.to_json())
    job = PipelineJob(
        settings=pipeline, stream=stream, redis_client=client, registry=registry, lineage=lineage, wait=1.0
    )
    try:
        # The topic is whole: its last step counts, complete or not (the last partition to end
        # can run out before that step's last document).
        report = job.run(max_steps=steps, until_idle=True)
    finally:
        job.close()
    if report["documents"] != documents:
        raise TokmaintError(
            f"the job counted {report['documents']:,} of the {documents:,} documents "
            f"in {report['steps']} steps (the broker slow to answer?)"
        )
    return report
