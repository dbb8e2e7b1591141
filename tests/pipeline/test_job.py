"""``tokmaint pipeline run`` on real servers (the Kafka-protocol broker, a redis-server and a
registry of the test session's own): the statistics in Redis equal the offline reference on the
same steps, revisions included and published; bad records land in the dead-letter topic exactly
once; a job killed with SIGKILL and restarted ends in the state of an uninterrupted run."""

import gzip
import json
import os
import signal
import subprocess
import time
import uuid

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from pipeline import stream as step_stream
from pipeline.job import PipelineJob
from pipeline.kafka import Record
from pipeline.metrics import PipelineMetrics
from pipeline.parts import connect_redis
from pipeline.redis_store import RedisStatsStore
from pipeline.config import PipelineSettings
from registry.client import RegistryClient
from registry.local_server import free_port, start_server
from schemas.document import decode_document
from tests.conftest import consume, produce, sentencepiece_style, trickle
from tests.support.cli import PIPELINE_OPTIONS, lineage_options, pipeline_run_command
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import batches, read_corpus
from tokenizer_service.evolve import StreamSettings
from tokenizer_service.stats_store import MemoryStatsStore
from tokenizer_service.tedtok import TedTok
from tokmaint.cli import main

STREAM = StreamSettings(
    step_docs=32, horizon_docs=320, interval_docs=64, warmup_docs=64, batch_size=8, id_price=0.0, base_token_cost=0.0
)
OPTIONS = [*PIPELINE_OPTIONS, "--batch-size", "8"]
ID_SPACE = 600  # past the largest id of either initial tokenizer (a SentencePiece one has 256 byte tokens more)
BAD = [b"not json", json.dumps({"id": "x", "text": None, "ts": "2020"}).encode()]


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory):
    process, url = start_server(tmp_path_factory.mktemp("registry"), env={"TOKMAINT_REGISTRY_TOKEN": "t" * 32})
    yield url
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def stream(broker, drifting_corpus):
    """The drifting corpus on a topic of its own, with two bad records among it."""
    topic = f"docs.job.{uuid.uuid4().hex[:6]}"
    assert main(["ingest", str(drifting_corpus), "--bootstrap", broker, "--topic", topic]) == 0
    produce(broker, topic, [Record(value, partition=k) for k, value in enumerate(BAD)])
    return topic


@pytest.fixture(scope="module")
def resent(broker, drifting_corpus):
    """The drifting corpus on a topic of its own, 60 of its records sent again later (a producer
    resending after timeouts): the same key and value, so the same partition."""
    topic = f"docs.resent.{uuid.uuid4().hex[:6]}"
    assert main(["ingest", str(drifting_corpus), "--bootstrap", broker, "--topic", topic]) == 0
    records = consume(broker, topic, expected=len(read_corpus(drifting_corpus).texts))
    produce(broker, topic, [(record.value, record.key) for record in records[::10]])
    return topic


@pytest.fixture(scope="module")
def initial(drifting_corpus):
    return BPETokenizer.train(read_corpus(drifting_corpus).texts[:200], vocab_size=300)


def _topics(broker: str, topic: str) -> PipelineSettings:
    """The pipeline's settings for ``topic`` and its dead-letter topic ``<topic>.dlq``."""
    return PipelineSettings(bootstrap=broker, docs_topic=topic, dlq_topic=f"{topic}.dlq")


def _job(settings: PipelineSettings, redis_url: str, registry: RegistryClient, lineage: str, **options) -> PipelineJob:
    """These tests' job: ``STREAM``'s revision rule, a second's wait for records (``options``: others)."""
    return PipelineJob(
        settings=settings,
        stream=STREAM,
        redis_client=redis.Redis.from_url(redis_url),
        registry=registry,
        lineage=lineage,
        **{"wait": 1.0, **options},
    )


def _lineage(registry_url, initial) -> str:
    name = f"job-{uuid.uuid4().hex[:8]}"
    RegistryClient(registry_url, token="t" * 32).create(name, initial.to_json())
    return name


def _state(redis_url, lineage, id_space=ID_SPACE):
    store = RedisStatsStore(connect_redis(redis_url), lineage=lineage, alpha=STREAM.tedtok_config().alpha)
    keys, values = store.top_pairs(store.tracked_pairs)
    return (
        store,
        store.token(np.arange(id_space)),
        store.buffer(np.arange(id_space)),
        dict(zip(keys.tolist(), values.tolist())),
    )


def _equal_to_the_offline_reference(redis_url, lineage, initial, steps, versions):
    """Assert the lineage's Redis statistics and published versions equal the offline Ted-Tok's
    over the same steps (lists of texts); its store and the reference."""
    config = STREAM.tedtok_config()
    reference = TedTok(initial, config=config, store=MemoryStatsStore(alpha=config.alpha), lineage=lineage)
    for texts in steps:
        reference.observe_texts(texts)
    assert reference.revisions, "the stream should drive revisions"
    assert [v.sha256 for v in versions[1:]] == [r.tokenizer.sha256 for r in reference.revisions]
    store, tokens, buffers, pairs = _state(redis_url, lineage)
    ids = np.arange(ID_SPACE)
    np.testing.assert_allclose(tokens, reference.store.token(ids), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(buffers, reference.store.buffer(ids), rtol=1e-9, atol=1e-12)
    keys, values = reference.store.top_pairs(reference.store.tracked_pairs)
    assert set(pairs) == set(keys.tolist())
    np.testing.assert_allclose([pairs[k] for k in keys.tolist()], values, rtol=1e-9)
    return store, reference


def test_statistics_and_revisions_equal_the_offline_reference(
    broker, redis_url, registry_url, stream, initial, drifting_corpus, monkeypatch, capsys, tmp_path
):
    lineage = _lineage(registry_url, initial)
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", "t" * 32)
    metrics, port = PipelineMetrics.create(lineage), free_port()
    metrics.serve(port, host="127.0.0.1")
    with RegistryClient(registry_url) as registry:
        job = _job(_topics(broker, stream), redis_url, registry, lineage, metrics=metrics)
        report = job.run(until_idle=True)
        job.close()
        versions = registry.versions(lineage).data
    assert (report["documents"], report["dead_lettered"], report["steps"]) == (600, len(BAD), 19)
    families = text_string_to_metric_families(httpx.get(f"http://127.0.0.1:{port}/metrics").text)
    scraped = {
        (s.name, s.labels.get("outcome")): s.value
        for family in families
        for s in family.samples
        if s.labels.get("lineage") == lineage
    }
    assert scraped[("tokmaint_pipeline_documents_total", None)] == 600
    assert scraped[("tokmaint_pipeline_steps_total", None)] == 19
    assert scraped[("tokmaint_pipeline_dead_letters_total", None)] == len(BAD)
    assert scraped[("tokmaint_pipeline_revisions_total", "ours")] == len(versions) - 1 == report["revisions"]
    assert scraped[("tokmaint_pipeline_consumer_lag", None)] == 0  # read to the end
    assert scraped[("tokmaint_pipeline_version", None)] == versions[-1].number
    assert scraped[("tokmaint_pipeline_bytes_per_token", None)] > 1
    assert scraped[("tokmaint_pipeline_step_seconds_count", None)] == 19

    steps = list(batches(read_corpus(drifting_corpus).documents, 32))
    store, reference = _equal_to_the_offline_reference(redis_url, lineage, initial, steps, versions)
    assert store.meta()["version"] == versions[-1].number and store.pending() is None
    client = RegistryClient(registry_url)
    for version in versions[1:]:  # each recorded the stream's bytes/token at a step, with its parent
        parent = client.tokenizer(lineage, version.parent)
        measured = {
            round(sum(len(t.encode()) for t in texts) / sum(map(len, parent.encode_batch(texts))), 9) for texts in steps
        }
        assert round(version.metrics["bytes_per_token"], 9) in measured

    assert (
        main(
            [
                "stats",
                "show",
                *lineage_options(redis_url, registry_url, lineage),
                "--top",
                "5",
                "--json",
            ]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert (shown["step"], shown["version"], shown["pending_revision"]) == (19, versions[-1].number, False)
    final = BPETokenizer.from_json(RegistryClient(registry_url).download(lineage, "latest").decode())
    expected = sorted(
        (
            (float(t), tok)
            for tok, t in zip(final.vocab, reference.store.token(np.fromiter(final.vocab.values(), np.int64)))
        ),
        reverse=True,
    )[:5]
    np.testing.assert_allclose(sorted(shown["tokens"].values(), reverse=True), [t for t, _ in expected], rtol=1e-9)
    assert len(shown["pairs"]) == 5 and len(shown["weakest_sinks"]) == 5

    snapshot = [
        "stats",
        "snapshot",
        *lineage_options(redis_url, registry_url, lineage),
        "--out",
        str(tmp_path),
        "--json",
    ]
    assert main(snapshot) == 0
    written = json.loads(capsys.readouterr().out)
    folder = tmp_path / lineage / "step-000000019"
    assert written["snapshot"] == str(folder) and written["version"] == versions[-1].number
    tokens = pq.read_table(folder / "tokens.parquet").to_pydict()
    assert dict(zip(tokens["token"], tokens["id"])) == final.vocab
    np.testing.assert_allclose(tokens["tau_token"], reference.store.token(np.array(tokens["id"])), rtol=1e-9)
    pairs = pq.read_table(folder / "pairs.parquet")
    assert pairs.num_rows == store.tracked_pairs and (folder / "neighbours.parquet").is_file()
    assert main(snapshot) == 0 and json.loads(capsys.readouterr().out)["snapshot"] == str(folder)  # kept
    assert sorted(p.name for p in (tmp_path / lineage).iterdir()) == [folder.name]  # nothing half-written

    dead = consume(broker, f"{stream}.dlq", expected=len(BAD))
    assert sorted(r.value for r in dead) == sorted(BAD) and len({r.key for r in dead}) == len(BAD)
    assert all(dict(r.headers)["tokmaint.source"] == stream.encode() for r in dead)


def test_a_job_reading_while_a_slow_producer_trickles_the_stream_in_equals_the_topics_replay(
    broker, redis_url, registry_url, initial, drifting_corpus, monkeypatch
):
    """The producer slow (records across many of the job's polls, partitions at different
    speeds) and the job slowed down (a few records taken from the client at a time): its steps,
    statistics and versions are those of the offline replay of the finished topic."""
    topic = f"docs.trickle.{uuid.uuid4().hex[:6]}"
    monkeypatch.setattr(step_stream, "POLL_RECORDS", 3)
    producer = trickle(broker, topic, drifting_corpus)
    lineage = _lineage(registry_url, initial)
    settings = _topics(broker, topic)
    with RegistryClient(registry_url, token="t" * 32) as registry:
        job = _job(settings, redis_url, registry, lineage)
        report = job.run(until_idle=True)
        job.close()
        versions = registry.versions(lineage).data
    producer.join()
    replayed = [[d.text for d in step.documents] for step in step_stream.topic_steps(settings, 32, wait=1.0)]
    assert (report["documents"], report["steps"]) == (600, len(replayed)) == (600, 19)
    _equal_to_the_offline_reference(redis_url, lineage, initial, replayed, versions)


def test_a_live_job_whose_producer_stops_mid_step_counts_the_finished_topics_steps(
    broker, redis_url, registry_url, initial, drifting_corpus, monkeypatch
):
    """The producer stops for longer than the job's wait mid-step, then goes on; the job runs
    live (not told the topic ends) for 18 steps, then to the topic's end: it counted the step it
    found short when the topic went quiet only once it was whole, so its steps, statistics and
    versions are those of the offline replay of the finished topic."""
    topic = f"docs.stall.{uuid.uuid4().hex[:6]}"
    monkeypatch.setattr(step_stream, "POLL_RECORDS", 3)
    producer = trickle(broker, topic, drifting_corpus, stall=(10, 2.5))
    lineage = _lineage(registry_url, initial)
    settings = _topics(broker, topic)
    with RegistryClient(registry_url, token="t" * 32) as registry:
        job = _job(settings, redis_url, registry, lineage)
        try:
            live = job.run(max_steps=18)
            producer.join()
            rest = job.run(until_idle=True)
        finally:
            job.close()
        versions = registry.versions(lineage).data
    replayed = [[d.text for d in step.documents] for step in step_stream.topic_steps(settings, 32, wait=1.0)]
    assert (live["documents"], live["steps"]) == (18 * 32, 18)
    assert (rest["documents"], rest["steps"]) == (24, 1) and len(replayed) == 19
    _equal_to_the_offline_reference(redis_url, lineage, initial, replayed, versions)


def test_a_sentencepiece_lineage_equals_the_offline_reference(broker, redis_url, registry_url, stream, drifting_corpus):
    """A Llama-2-style tokenizer (▁ for spaces, byte fallback) as version 1: the pipeline's
    statistics and versions are the offline Ted-Tok's."""
    initial = sentencepiece_style(read_corpus(drifting_corpus).texts[:200], vocab_size=300)
    assert initial.byte_fallback and initial.id_space <= ID_SPACE
    lineage = _lineage(registry_url, initial)
    with RegistryClient(registry_url, token="t" * 32) as registry:
        job = _job(_topics(broker, stream), redis_url, registry, lineage)
        report = job.run(until_idle=True)
        job.close()
        versions = registry.versions(lineage).data
    assert report["documents"] == 600 and report["revisions"] == len(versions) - 1
    steps = list(batches(read_corpus(drifting_corpus).documents, 32))
    _, reference = _equal_to_the_offline_reference(redis_url, lineage, initial, steps, versions)
    assert reference.tokenizer.byte_fallback and reference.tokenizer.pipeline == initial.pipeline


def test_event_time_steps_are_windows_cut_at_the_step_cap(
    broker, redis_url, registry_url, stream, initial, drifting_corpus
):
    """With ``step_seconds`` a step is one window of event time (45 s: 45 documents of the corpus,
    one a second), at most ``max_step_docs`` (40) of them: the statistics and revisions equal the
    offline reference on those steps."""
    lineage = _lineage(registry_url, initial)
    settings = PipelineSettings(
        bootstrap=broker, docs_topic=stream, dlq_topic=f"{stream}.dlq", step_seconds=45, max_step_docs=40
    )
    with RegistryClient(registry_url, token="t" * 32) as registry:
        job = _job(settings, redis_url, registry, lineage)
        try:
            report = job.run(until_idle=True)
        finally:
            job.close()
        versions = registry.versions(lineage).data
    docs = read_corpus(drifting_corpus).documents
    windows: dict[int, list[str]] = {}
    for doc in docs:
        windows.setdefault(int(doc.ts.timestamp() // 45), []).append(doc.text)
    steps = [texts[k : k + 40] for _, texts in sorted(windows.items()) for k in range(0, len(texts), 40)]
    assert report["steps"] == len(steps) == 2 * 13 + 1 and report["documents"] == 600

    _equal_to_the_offline_reference(redis_url, lineage, initial, steps, versions)


def _run(broker, redis_url, registry_url, stream, lineage, *extra) -> subprocess.Popen:
    env = {**os.environ, "TOKMAINT_REGISTRY_TOKEN": "t" * 32}
    return subprocess.Popen(
        pipeline_run_command(
            broker,
            stream,
            "--dlq-topic",
            f"{stream}.dlq",
            *lineage_options(redis_url, registry_url, lineage),
            *OPTIONS,
            *extra,
        ),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_the_job_on_a_redis_cluster_equals_the_offline_reference(
    broker, redis_cluster, registry_url, stream, initial, drifting_corpus
):
    """The command, given one node of a three-node Redis Cluster, keeps the lineage's statistics
    in the cluster (its keys on the node of their slot), the same as on one redis-server."""
    lineage = _lineage(registry_url, initial)
    job = _run(broker, redis_cluster, registry_url, stream, lineage, "--until-idle", "--json")
    out, err = job.communicate(timeout=300)
    assert job.returncode == 0, err.decode()[-2000:]
    assert json.loads(out)["documents"] == 600
    versions = RegistryClient(registry_url).versions(lineage).data
    steps = list(batches(read_corpus(drifting_corpus).documents, 32))
    store, _ = _equal_to_the_offline_reference(redis_cluster, lineage, initial, steps, versions)
    assert isinstance(store.client, redis.RedisCluster) and store.meta()["step"] == 19


@pytest.mark.parametrize("topic", ["stream", "resent"])
def test_a_job_killed_and_restarted_ends_as_an_uninterrupted_one(
    broker, redis_url, registry_url, initial, topic, request
):
    """Also on a topic holding resent documents: the ids a step counted are kept with the
    statistics, so a restarted job skips a resend as the uninterrupted one does."""
    stream = request.getfixturevalue(topic)
    whole, killed = _lineage(registry_url, initial), _lineage(registry_url, initial)
    uninterrupted = _run(broker, redis_url, registry_url, stream, whole, "--until-idle", "--json")
    out, _ = uninterrupted.communicate(timeout=300)
    assert uninterrupted.returncode == 0
    report = json.loads(out)
    assert (report["documents"], report["duplicates"]) == ((600, 0) if topic == "stream" else (600, 60))
    client = redis.Redis.from_url(redis_url)
    for kill_at in (3, 8, 12):  # mid-stream, three times: during counting, after a write, near a revision
        process = _run(broker, redis_url, registry_url, stream, killed)
        deadline = time.monotonic() + 120
        while int(client.hget(f"tokmaint:{{{killed}}}:meta", "step") or 0) < kill_at:
            assert time.monotonic() < deadline and process.poll() is None, process.stderr.read().decode()[-2000:]
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert _run(broker, redis_url, registry_url, stream, killed, "--until-idle").wait(timeout=300) == 0

    (_, tokens, buffers, pairs), (store, tokens_k, buffers_k, pairs_k) = (
        _state(redis_url, whole),
        _state(redis_url, killed),
    )
    np.testing.assert_allclose(tokens_k, tokens, rtol=1e-12)
    np.testing.assert_allclose(buffers_k, buffers, rtol=1e-12)
    assert pairs_k.keys() == pairs.keys()
    np.testing.assert_allclose([pairs_k[k] for k in pairs], [pairs[k] for k in pairs], rtol=1e-12)
    with RegistryClient(registry_url) as registry:
        assert [v.sha256 for v in registry.versions(killed).data] == [v.sha256 for v in registry.versions(whole).data]
        # What is published with them too: a restarted job once lost a version's bytes/token.
        assert [v.metrics for v in registry.versions(killed).data] == [v.metrics for v in registry.versions(whole).data]
    assert store.meta()["step"] == _state(redis_url, whole)[0].meta()["step"]
    assert store.meta()["documents"] == 600  # every unique document counted once, through three kills
    assert store.meta()["step"] == 19 or topic == "resent"  # resends take room in steps: more steps


def _unrevised_steps(broker, redis_url, registry_url, stream, initial, *, steps: int) -> str:
    """A new lineage whose statistics hold ``steps`` steps that the job did not revise."""
    lineage = _lineage(registry_url, initial)
    # The last --interval-docs is the one taken: the job makes no revision itself.
    run = _run(broker, redis_url, registry_url, stream, lineage, "--max-steps", str(steps), "--interval-docs", "100000")
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err.decode()[-2000:]
    return lineage


def test_revise_makes_one_published_revision_from_the_statistics(
    broker, redis_url, registry_url, stream, initial, capsys, monkeypatch
):
    lineage = _unrevised_steps(broker, redis_url, registry_url, stream, initial, steps=14)
    revise = [
        "revise",
        *lineage_options(redis_url, registry_url, lineage),
        "--batch-size",
        "8",
        "--id-price",
        "0",
        "--base-token-cost",
        "0",
        "--json",
    ]
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", "t" * 32)
    assert main(revise) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(revise) == 0
    second = json.loads(capsys.readouterr().out)
    assert (first["step"], first["revised"], first["version"]) == (14, True, 2)
    assert (second["revised"], second["already_revised_at_this_step"], second["version"]) == (False, True, 2)
    assert not first["revised_meanwhile"] and not second["revised_meanwhile"]
    store = RedisStatsStore.open(redis.Redis.from_url(redis_url), lineage=lineage)
    assert store.meta()["version"] == 2 and store.meta()["revised"] == 14 and store.pending() is None
    assert RegistryClient(registry_url).version(lineage).number == 2


def test_a_revision_planned_while_another_process_revises_writes_nothing(
    broker, redis_url, registry_url, stream, initial
):
    """Two revisers of one lineage's statistics at one step (a revise CronJob beside the
    pipeline): the first to write wins, the other is refused and leaves everything as it was."""
    from pipeline.lineage_statistics import LineageStatistics, RevisedMeanwhile

    lineage = _unrevised_steps(broker, redis_url, registry_url, stream, initial, steps=14)
    settings = StreamSettings(batch_size=8, id_price=0, base_token_cost=0)
    with RegistryClient(registry_url, token="t" * 32) as registry:
        ours, theirs = (
            LineageStatistics(
                stream=settings,
                redis_client=redis.Redis.from_url(redis_url),
                registry=registry,
                lineage=lineage,
                existing=True,
            )
            for _ in range(2)
        )
        late = ours.plan(14)
        assert late.revision is not None
        assert theirs.revise(14)
        store = theirs.store
        before = (store.meta(), store.pending(), store.top_pairs(50))
        with pytest.raises(RevisedMeanwhile, match=f"lineage '{lineage}' was revised after step 14 by another"):
            ours.commit(late)
        after = (store.meta(), store.pending(), store.top_pairs(50))
        assert before[0] == after[0] and before[1] == after[1] and before[0]["version"] == 2
        assert all(np.array_equal(x, y) for x, y in zip(before[2], after[2]))
        assert registry.version(lineage).number == 2


def test_a_version_published_elsewhere_is_used_from_the_next_step(broker, redis_url, registry_url, stream, initial):
    lineage = _lineage(registry_url, initial)
    with RegistryClient(registry_url, token="t" * 32) as registry:
        job = _job(_topics(broker, stream), redis_url, registry, lineage)
        try:
            job.run(max_steps=12)
            ours = job.tedtok.version
            assert ours > 1, "the job should have revised by now"
            rollback = registry.rollback(lineage, to=1).number  # someone else publishes
            changed = [e.id for e in registry.composed_diff(lineage, ours, rollback).entries]
            assert changed
            assert job.lineage_stats.follow()
            store = job.store
            assert store.meta()["version"] == rollback == job.tedtok.version
            assert job.tedtok.tokenizer.sha256 == initial.sha256  # counting with the rolled-back version
            assert store.token(np.array(changed)).tolist() == [0.0] * len(changed)  # nothing stale on them
            keys, _ = store.top_pairs(store.tracked_pairs)
            assert not {u for k in keys.tolist() for u in (k >> 32, k & 0xFFFFFFFF)} & set(changed)
            job.run(max_steps=1)
            assert store.meta()["version"] >= rollback and not job.lineage_stats.follow()
        finally:
            job.close()


def test_steps_counted_ahead_of_a_revision_another_version_beat_are_counted_again(
    broker, redis_url, registry_url, stream, initial
):
    """The step after a revision is counted with the planned version while the revision is
    committed; when someone else publishes first (a rollback, here just before the job's own
    publish), the statistics move to that version and the steps counted ahead are counted
    again with it before they are written."""
    lineage = _lineage(registry_url, initial)
    with RegistryClient(registry_url, token="t" * 32) as registry:
        job = _job(_topics(broker, stream), redis_url, registry, lineage)
        commit, raced, submitted, prepared = job.lineage_stats.commit, [], [], []

        def commit_after_a_rollback(plan):
            if plan.revision is not None and not raced:
                raced.append((plan.revision.tokenizer.sha256, registry.rollback(lineage, to=1).number))
            return commit(plan)

        def prepare(texts, prepare=job.counting.process.prepare):  # the step after a revision: submitted as None
            prepared.append(tuple(texts))
            return prepare(texts)

        def submit(texts, tokenizer, submit=job.counting.process.submit):
            submitted.append((prepared.pop() if texts is None else tuple(texts), tokenizer.sha256))
            return submit(texts, tokenizer)

        recounted = []

        def recount(texts, recount=job._recount):  # a whole step, counted again (the shares vary by timing)
            recounted.append(tuple(texts))
            return recount(texts)

        job.lineage_stats.commit, job.counting.process.prepare, job.counting.process.submit, job._recount = (
            commit_after_a_rollback,
            prepare,
            submit,
            recount,
        )
        try:
            job.run(until_idle=True)
        finally:
            job.close()
        versions = registry.versions(lineage).data
    ((planned, rollback),) = raced
    assert planned not in {v.sha256 for v in versions}  # the planned revision lost the race
    assert versions[rollback - 1].sha256 == initial.sha256 and len(versions) > rollback  # and the job went on
    ahead = [texts for texts, sha in submitted if sha == planned]  # (the counting process's share of a step)
    assert ahead and all(any(whole[: len(texts)] == texts for whole in recounted) for texts in ahead)
    assert any(sha == initial.sha256 for _, sha in submitted)  # counted again with the rolled-back version
    store = RedisStatsStore.open(redis.Redis.from_url(redis_url), lineage=lineage)
    assert store.meta()["version"] == versions[-1].number and store.meta()["step"] == 19


def test_a_kept_revision_the_registry_will_not_take_gives_way_to_the_latest(
    broker, redis_url, registry_url, stream, initial
):
    """A crash between keeping a revision and publishing it, while someone publishes on top: on
    restart the statistics move to the registry's latest and the kept revision goes."""
    lineage = _lineage(registry_url, initial)
    settings = _topics(broker, stream)
    with RegistryClient(registry_url, token="t" * 32) as registry:
        job = _job(settings, redis_url, registry, lineage)
        try:
            job.run(max_steps=12)
            revision = job.tedtok.revise()  # ... kept, and then the process dies before publishing it
            assert revision is not None
            kept = json.dumps({"tokenizer": revision.tokenizer.to_json(), "diff": revision.diff.to_json()})
            assert job.store.write_revision(revision.edit, step=job.store.step + 100, pending=kept.encode())
        finally:
            job.close()
        rollback = registry.rollback(lineage, to=1).number  # meanwhile, someone else publishes
        restarted = _job(settings, redis_url, registry, lineage)
        try:
            assert restarted.store.pending() is None and restarted.store.meta()["version"] == rollback
            assert restarted.tedtok.version == rollback and restarted.tedtok.tokenizer.sha256 == initial.sha256
            assert revision.tokenizer.sha256 not in {v.sha256 for v in registry.versions(lineage).data}
            restarted.run(max_steps=1)  # and it goes on from there
        finally:
            restarted.close()


def test_neighbour_statistics_and_the_residues_job(
    broker, redis_url, registry_url, stream, initial, drifting_corpus, tmp_path, capsys, monkeypatch
):
    """The neighbour EMA (adjacent tokens across words, by their text) equals an offline EMA of the
    same steps with the same versions; residues-job scores from it,
    keeps the residues in Redis, writes Parquet, and publishes a residue-free version."""
    from tokenizer_service.litetoken import CorpusCounts

    lineage = _lineage(registry_url, initial)
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", "t" * 32)
    with RegistryClient(registry_url) as registry:
        job = _job(_topics(broker, stream), redis_url, registry, lineage)
        job.run(until_idle=True)
        job.close()

    alpha = STREAM.tedtok_config().alpha
    reference = TedTok(initial, config=STREAM.tedtok_config(), store=MemoryStatsStore(alpha=alpha), lineage=lineage)
    ema: dict[tuple[str, str], float] = {}  # by the tokens' text: a recycled id inherits nothing
    for texts in batches(read_corpus(drifting_corpus).documents, 32):
        tokenizer = reference.tokenizer
        counts = CorpusCounts.from_id_lists(tokenizer.encode_batch(texts), tokenizer.id_space)
        ema = {k: (1 - alpha) * v for k, v in ema.items()}
        for k, c in zip(counts.neighbour_keys.tolist(), counts.neighbour_counts.tolist()):
            pair = (tokenizer.id_to_token[k >> 32], tokenizer.id_to_token[k & 0xFFFFFFFF])
            ema[pair] = ema.get(pair, 0.0) + alpha * c
        reference.observe_texts(texts)
    store = RedisStatsStore.open(redis.Redis.from_url(redis_url), lineage=lineage)
    stored = store.neighbours()
    assert stored.keys() == ema.keys()
    np.testing.assert_allclose([stored[k] for k in ema], list(ema.values()), rtol=1e-9)

    out = tmp_path / "residues"
    # Thresholds past the paper's, so that this small vocabulary has residues that are not
    # scaffolding of others, and the removal is published.
    assert (
        main(
            [
                "residues-job",
                *lineage_options(redis_url, registry_url, lineage),
                "--scope",
                "all",
                "--r",
                "1",
                "--s",
                "100",
                "--out",
                str(out),
                "--publish",
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["residues"] > 0
    assert (out / "scores.parquet").is_file() and (out / "tokenizer.json").is_file()
    assert store.residues()["version"] == result["version"] and len(store.residues()["residues"]) == result["residues"]
    latest = RegistryClient(registry_url).version(lineage)
    assert result["export"]["removed"] > 0 and latest.number == result["published"] and latest.kind == "litetoken"


def test_the_latest_version_follows_the_registrys_watch(registry_url, initial):
    """What the job asks before each step, with no request: the watch thread sees a publish."""
    from registry.client import LatestVersion

    lineage = _lineage(registry_url, initial)
    with LatestVersion(registry_url, lineage) as latest:
        assert latest.number == 1
        published = RegistryClient(registry_url, token="t" * 32).rollback(lineage, to=1).number
        deadline = time.monotonic() + 10
        while latest.number != published:
            assert time.monotonic() < deadline, "the watch did not see the publish"
            time.sleep(0.05)


def test_bench_pipeline_streams_the_whole_corpus_and_reports_its_figures(drifting_corpus, capsys):
    """``tokmaint bench pipeline`` on its own broker, Redis and registry: every run counts every
    document in the steps it runs, with a revision; the figures are the median run's, and the
    JSON has the issue's keys."""
    from tokmaint.cli import main

    assert (
        main(
            [
                "bench",
                "pipeline",
                "--corpus",
                str(drifting_corpus),
                "--vocab-size",
                "300",
                "--step-docs",
                "50",
                "--interval-docs",
                "200",
                "--horizon-docs",
                "400",
                "--step-repeats",
                "2",
                "--repeats",
                "3",
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    runs = result["runs"]
    assert len(runs) == 3 and all((r["documents"], r["steps"]) == (600, 12) and r["revisions"] >= 1 for r in runs)
    assert result["ratio"] == sorted(r["ratio"] for r in runs)[1]
    assert result["ratio"] == pytest.approx(result["pipeline_mb_s"] / result["encode_mb_s"])
    assert (result["documents"], result["steps"]) == (600, 12) and result["revisions"] >= 1
    assert set(result["step_seconds"]) == set(result["read_seconds"]) == {"pairs_10k", "pairs_1m"}


# Documents dated outside the event-time window, each with its ts as its Kafka timestamp (a producer
# other than tokmaint's, which refuse them), and the words their dead letters' reasons hold.
OUT_OF_WINDOW = [
    ({"id": "ahead-2099", "text": "from the future", "ts": "2099-01-01T00:00:00Z"}, "ahead of the clock"),
    ({"id": "ahead-9999", "text": "the end of time", "ts": "9999-12-31T23:59:59Z"}, "ahead of the clock"),
    ({"id": "before-1970", "text": "before the epoch", "ts": "1960-06-01T00:00:00Z"}, "is not after the epoch"),
    ({"id": "epoch", "text": "at 0", "ts": "1970-01-01T00:00:00Z"}, "is not after the epoch"),
]


def test_documents_dated_years_ahead_or_before_1970_are_dead_lettered_and_the_rest_counted(
    broker, redis_url, registry_url, initial, drifting_corpus, tmp_path
):
    """300 documents, then documents dated 2099, 9999, 1960 and 1970-01-01 (Kafka timestamps as
    their ts), then the 300 later ones, in 45-second windows: each of the four is dead-lettered
    with its reason, and the statistics and versions equal the replay of the 600 ordinary ones."""
    topic = f"docs.ahead.{uuid.uuid4().hex[:6]}"
    lines = gzip.open(drifting_corpus, "rt").read().splitlines()
    for name, part in (("first", lines[:300]), ("later", lines[300:])):
        (path := tmp_path / f"{name}.jsonl").write_text("\n".join(part) + "\n")
        assert main(["ingest", str(path), "--bootstrap", broker, "--topic", topic]) == 0
        if name == "first":
            bad = [json.dumps(doc).encode() for doc, _ in OUT_OF_WINDOW]
            produce(broker, topic, [Record(value, timestamp=decode_document(value).ts_ms) for value in bad])
    lineage = _lineage(registry_url, initial)
    settings = PipelineSettings(
        bootstrap=broker, docs_topic=topic, dlq_topic=f"{topic}.dlq", step_seconds=45, max_step_docs=40
    )
    with RegistryClient(registry_url, token="t" * 32) as registry:
        job = _job(settings, redis_url, registry, lineage)
        try:
            report = job.run(until_idle=True)
        finally:
            job.close()
        versions = registry.versions(lineage).data
    windows: dict[int, list[str]] = {}
    for doc in read_corpus(drifting_corpus).documents:
        windows.setdefault(int(doc.ts.timestamp() // 45), []).append(doc.text)
    steps = [texts[k : k + 40] for _, texts in sorted(windows.items()) for k in range(0, len(texts), 40)]
    assert (report["documents"], report["steps"]) == (600, len(steps))
    _equal_to_the_offline_reference(redis_url, lineage, initial, steps, versions)
    dead = {
        decode_document(r.value).id: dict(r.headers)["tokmaint.reason"].decode()
        for r in consume(broker, f"{topic}.dlq", expected=4)
    }
    assert sorted(dead) == sorted(doc["id"] for doc, _ in OUT_OF_WINDOW)
    for doc, words in OUT_OF_WINDOW:
        assert words in dead[doc["id"]] and doc["ts"][:4] in dead[doc["id"]], dead
