"""A command whose Redis or broker is down: it waits the bounded ``--wait``, says what it waits
for, then stops with one line naming the part and its address (exit 2), never a traceback or a hang."""

import subprocess
import sys
import time

import pytest

from registry.local_server import free_port


def _run(*argv: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "tokmaint.cli", *argv], capture_output=True, text=True, timeout=120)
    return result, time.monotonic() - started


@pytest.mark.parametrize("redis_url, says", [
    ("redis://127.0.0.1:{port}/0", "Redis at redis://127.0.0.1:{port}/0 did not answer in 2 s"),
    ("redis://127.0.0.1:notaport/0", "Redis: 'redis://127.0.0.1:notaport/0' is no Redis URL"),
    ("http://127.0.0.1:{port}", "is no Redis URL"),
])
def test_pipeline_run_without_redis_is_one_line_exit_2(broker, redis_url, says):
    port = free_port()  # nothing listens there
    result, seconds = _run("pipeline", "run", "--lineage", "x", "--redis", redis_url.format(port=port),
                           "--bootstrap", broker, "--registry", "http://127.0.0.1:1", "--wait", "2", "--until-idle")
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
    """--wait is a wait, not a single try: Redis started a second after the command still serves it."""
    port = free_port()
    command = subprocess.Popen([sys.executable, "-m", "tokmaint.cli", "stats", "show", "--lineage", "none",
                                "--redis", f"redis://127.0.0.1:{port}/0", "--registry", "http://127.0.0.1:1",
                                "--wait", "60"], stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        _, stderr = command.communicate(timeout=90)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "waiting up to" in stderr and f"Redis at redis://127.0.0.1:{port}/0" in stderr
    assert "did not answer" not in stderr  # it got past Redis (and stopped later, at the registry)


def test_a_job_to_the_end_of_a_topic_nobody_sent_to_is_one_line_exit_2(broker, redis_url):
    """It exited 0 having read nothing; a long-running job (no --until-idle) waits for the topic."""
    result, _ = _run("pipeline", "run", "--lineage", "x", "--redis", redis_url, "--bootstrap", broker,
                     "--topic", "never.sent.to", "--registry", "http://127.0.0.1:1", "--wait", "2", "--until-idle")
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"the Kafka broker at {broker} with topic 'never.sent.to' did not answer in 2 s" in last
    assert "no topic 'never.sent.to' there yet" in last
