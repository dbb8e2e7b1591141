"""A command whose Redis or broker is down: it waits the bounded ``--wait``, says what it waits
for, then stops with one line naming the part and its address (exit 2), never a traceback or a hang."""

import subprocess
import sys
import time

import pytest

from registry.local_server import free_port
from tests.support.cli import PIPELINE_OPTIONS, lineage_options, pipeline_run_command


def _run(*argv: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "tokmaint.cli", *argv], capture_output=True, text=True, timeout=120)
    return result, time.monotonic() - started


def _run_pipeline(broker: str, redis_url: str, *options: str) -> tuple[subprocess.CompletedProcess, float]:
    """``pipeline run --until-idle`` of lineage x on ``broker`` and ``redis_url`` (with ``options``),
    waiting 2 s for each part, its registry one nothing serves (port 1): its result and seconds."""
    parts = lineage_options(redis_url, "http://127.0.0.1:1", "x")
    return _run("pipeline", "run", "--bootstrap", broker, *parts, "--wait", "2", "--until-idle", *options)


@pytest.mark.parametrize(
    "redis_url, says",
    [
        ("redis://127.0.0.1:{port}/0", "Redis at redis://127.0.0.1:{port}/0 did not answer in 2 s"),
        ("redis://127.0.0.1:notaport/0", "Redis: 'redis://127.0.0.1:notaport/0' is not a Redis URL"),
        ("http://127.0.0.1:{port}", "is not a Redis URL"),
    ],
)
def test_pipeline_run_without_redis_is_one_line_exit_2(broker, redis_url, says):
    port = free_port()  # nothing listens there
    result, seconds = _run_pipeline(broker, redis_url.format(port=port))
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if "waiting up to" not in line]
    assert len(lines) == 1 and says.format(port=port) in lines[0] and "Traceback" not in result.stderr, result.stderr
    assert seconds < 60


def test_ingest_without_a_broker_is_one_line_exit_2(tmp_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"text": "a document", "ts": "2021-01-01"}\n')
    address = f"127.0.0.1:{free_port()}"
    result, seconds = _run("ingest", str(corpus), "--bootstrap", address, "--wait", "2")
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"the Kafka broker at {address} did not answer in 2 s" in last and "Traceback" not in result.stderr
    assert seconds < 60


def test_a_part_that_comes_up_while_the_command_waits_is_used():
    """--wait is a wait, not a single try: Redis started once the command says it waits still serves it."""
    port = free_port()
    command = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tokmaint.cli",
            "stats",
            "show",
            "--lineage",
            "none",
            "--redis",
            f"redis://127.0.0.1:{port}/0",
            "--registry",
            "http://127.0.0.1:1",
            "--wait",
            "60",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    said = []  # up to the line saying it waits (a loaded machine takes seconds to get there)
    while not said or "waiting up to" not in said[-1]:
        said.append(command.stderr.readline())
        assert said[-1], "".join(said)  # the command ended without waiting
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        stderr = "".join(said) + command.communicate(timeout=90)[1]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert f"Redis at redis://127.0.0.1:{port}/0" in said[-1]
    assert "did not answer" not in stderr  # it got past Redis (and stopped later, at the registry)


def test_a_job_to_the_end_of_a_topic_nobody_sent_to_is_one_line_exit_2(broker, redis_url):
    """It exited 0 having read nothing; a long-running job (no --until-idle) waits for the topic."""
    result, _ = _run_pipeline(broker, redis_url, "--topic", "never.sent.to")
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"the Kafka broker at {broker} with topic 'never.sent.to' did not answer in 2 s" in last
    assert "no topic 'never.sent.to' there yet" in last


def test_a_long_running_job_waits_for_the_registry_and_publishes_once_it_answers(
    broker, redis_url, drifting_corpus, tmp_path
):
    """The registry down while the job starts and revises (killed, restarted): the job waits for
    it, then goes on from its statistics and publishes; it does not exit, says once that the
    registry is away and once that it is back, and its ``/metrics`` counts the time without it."""
    import os
    import uuid

    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from registry.client import RegistryClient
    from tokenizer_service.bpe import BPETokenizer
    from tokenizer_service.corpus import read_corpus
    from tokmaint.cli import main

    topic, lineage, token, port = f"docs.parts.{uuid.uuid4().hex[:6]}", "parts", "p" * 32, free_port()
    url = f"http://127.0.0.1:{port}"
    assert main(["ingest", str(drifting_corpus), "--bootstrap", broker, "--topic", topic]) == 0
    env = {**os.environ, "TOKMAINT_REGISTRY_TOKEN": token}
    serve = [
        sys.executable,
        "-m",
        "tokmaint.cli",
        "registry",
        "serve",
        "--port",
        str(port),
        "--db",
        f"sqlite:///{tmp_path / 'registry.db'}",
        "--artifacts",
        str(tmp_path / "artifacts"),
    ]

    def registry() -> subprocess.Popen:
        process = subprocess.Popen(serve, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return process
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.1)

    server = registry()
    initial = BPETokenizer.train(read_corpus(drifting_corpus).texts[:200], vocab_size=300)
    RegistryClient(url, token=token).create(lineage, initial.to_json())
    server.terminate()
    server.wait(timeout=30)
    metrics_port = free_port()
    job = subprocess.Popen(
        pipeline_run_command(
            broker,
            topic,
            *lineage_options(redis_url, url, lineage),
            *PIPELINE_OPTIONS,
            "--metrics-port",
            str(metrics_port),
        ),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3)
        assert job.poll() is None  # waiting, not gone
        server = registry()
        deadline = time.monotonic() + 120
        while RegistryClient(url).version(lineage).number < 3:
            assert job.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        families = text_string_to_metric_families(httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text)
        away = [s.value for f in families for s in f.samples if s.name == "tokmaint_registry_away_seconds"]
    finally:
        job.terminate()
        stderr = job.communicate(timeout=60)[1]
        server.terminate()
        server.wait(timeout=30)
    assert f"the registry at {url}" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert stderr.count(f"registry: {url} is away (") == 1 and stderr.count(f"registry: {url} is back after") == 1
    assert len(away) == 1 and away[0] > 1.0
