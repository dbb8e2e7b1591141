"""``tokmaint ingest-server`` (a real uvicorn server) against the real broker: good documents go to
the topic keyed by id, refused ones to the dead-letter topic with the reason, the answer counts
both; writes need the token; and a bounded loopback load test reports documents per second."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from registry.local_server import free_port
from tests.conftest import consume, trickle_body
from tests.support.polling import until

TOKEN = "i" * 32


@pytest.fixture(scope="module")
def served(broker):
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tokmaint.cli",
            "ingest-server",
            "--port",
            str(port),
            "--bootstrap",
            broker,
            "--topic",
            "docs.http",
            "--dlq-topic",
            "docs.http.dlq",
        ],
        env={**os.environ, "TOKMAINT_REGISTRY_TOKEN": TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read().decode()[-2000:]
            time.sleep(0.1)
    yield url, process
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(served):
    return served[0]


def _resident_mb(pid: int) -> float:
    return next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS")) / 1024


def _doc(k: int, **changes) -> dict:
    return {"id": f"h{k}", "text": f"document number {k}", "ts": f"2021-01-01T00:00:{k % 60:02d}Z", **changes}


def _post(
    url: str,
    body: bytes,
    content_type: str = "application/x-ndjson",
    token: str | None = TOKEN,
    topic: str = "docs.http",
) -> httpx.Response:
    headers = {"Content-Type": content_type} | ({"Authorization": f"Bearer {token}"} if token else {})
    return httpx.post(f"{url}/v1/streams/{topic}/documents", content=body, headers=headers, timeout=60)


def test_good_documents_are_produced_and_refused_ones_dead_lettered(server, broker):
    lines = [json.dumps(_doc(k)) for k in range(5)] + [json.dumps(_doc(5, ts=None)), "not json"]
    answer = _post(server, "\n".join(lines).encode()).json()
    assert (answer["accepted"], answer["refused"]) == (5, 2)
    assert [r["record"] for r in answer["refusals"]] == [5, 6]
    assert answer["refusals"][0]["reason"] == "'ts' must be an ISO-8601 string, got null"
    array = _post(server, json.dumps([_doc(k) for k in range(5, 8)]).encode(), "application/json").json()
    assert (array["accepted"], array["refused"]) == (3, 0)

    docs = consume(broker, "docs.http", expected=8)
    assert sorted(r.key.decode() for r in docs) == [f"h{k}" for k in range(8)]
    dead = consume(broker, "docs.http.dlq", expected=2)
    assert sorted(dict(r.headers)["tokmaint.reason"].decode()[:8] for r in dead) == ["'ts' mus", "not JSON"]


@pytest.mark.parametrize("form", ["array", "ndjson"])
def test_each_record_is_produced_once_or_dead_lettered_even_when_one_cannot_be(server, broker, form):
    """A lone surrogate in an id or a text, or a record larger than the broker takes, between
    good ones: the good ones are produced once, the bad ones dead-lettered with the reason, and
    a resend of the same body produces the good ones once more, never a 500."""
    good = [json.dumps(_doc(k, id=f"{form}-{k}")) for k in range(3)]
    bad = [
        json.dumps(_doc(7, id="\ud800"))[:-1] + "}",
        json.dumps(_doc(8, text="x\ud800"))[:-1] + "}",
        json.dumps(_doc(9, text="y" * (5 << 20))),
    ]
    records = [good[0], bad[0], good[1], bad[1], bad[2], good[2]]
    if form == "array":
        body, content_type = ("[" + ",".join(records) + "]").encode(), "application/json"
    else:
        body, content_type = "\n".join(records).encode(), "application/x-ndjson"
    response = _post(server, body, content_type)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["accepted"], answer["refused"]) == (3, 3)
    reasons = {r["record"]: r["reason"] for r in answer["refusals"]}
    assert reasons[1] == "'id' holds a lone surrogate (not valid Unicode)"
    assert reasons[3] == "'text' holds a lone surrogate (not valid Unicode)"
    assert reasons[4].startswith("larger than the limit (5,")
    # The answer came once the broker had every record: two seconds with nothing new are the topic's end.
    produced = [r for r in consume(broker, "docs.http", expected=10_000, timeout=2) if r.key.decode().startswith(form)]
    assert sorted(r.key.decode() for r in produced) == [f"{form}-{k}" for k in range(3)]
    dead = [
        r
        for r in consume(broker, "docs.http.dlq", expected=10_000, timeout=2)
        if dict(r.headers)["tokmaint.reason"].decode() in reasons.values()
        and dict(r.headers).get("tokmaint.source") == b"http docs.http"
    ]
    assert len(dead) >= 3
    too_large = next(r for r in dead if dict(r.headers)["tokmaint.reason"].startswith(b"larger"))
    assert int(dict(too_large.headers)["tokmaint.bytes"]) > 5 << 20 and len(too_large.value) == 1 << 20


def test_writes_need_the_token_and_the_configured_topic(server):
    """Refused in the registry's one error shape."""
    body = json.dumps(_doc(0)).encode()
    for response, status, code in [
        (_post(server, body, token=None), 401, "unauthorized"),
        (_post(server, body, token="wrong"), 401, "unauthorized"),
        (_post(server, body, topic="elsewhere"), 404, "not_found"),
        (_post(server, b'{"a": 1}', "application/json"), 422, "invalid_request"),
    ]:
        assert response.status_code == status
        answer = response.json()
        assert set(answer) == {"error_code", "message", "reasons"} and answer["error_code"] == code, answer


def test_a_chunked_upload_over_the_limit_is_refused_before_it_is_buffered(served):
    """No Content-Length: the server must count as it reads, not hold 256 MiB first."""
    url, process = served
    before = _resident_mb(process.pid)
    chunk = (json.dumps(_doc(0)) + "\n").encode() * (1 << 14)

    def body():
        for _ in range((256 << 20) // len(chunk)):
            yield chunk

    headers = {"Content-Type": "application/x-ndjson", "Authorization": f"Bearer {TOKEN}"}
    try:
        response = httpx.post(f"{url}/v1/streams/docs.http/documents", content=body(), headers=headers, timeout=60)
        assert response.status_code == 413 and response.json()["error_code"] == "too_large"
    except httpx.HTTPError:  # the server answered and closed while the client still sent: no 413 read
        pass
    assert _resident_mb(process.pid) - before < 128  # the 64 MiB limit, not the 256 MiB sent


def test_a_bounded_load_test_reports_documents_per_second(server, broker, capsys):
    batches, size = 20, 500
    started = time.perf_counter()
    for b in range(batches):
        body = "\n".join(json.dumps(_doc(1000 + b * size + k)) for k in range(size)).encode()
        assert _post(server, body).json()["accepted"] == size
    rate = batches * size / (time.perf_counter() - started)
    with capsys.disabled():
        print(f"\ningest-server: {batches * size} documents in {batches} requests, {rate:,.0f} documents/s")
    assert len(consume(broker, "docs.http", expected=8 + batches * size, timeout=60)) >= batches * size


def test_a_body_of_more_records_than_a_request_takes_is_refused_whole_and_at_once(server, broker):
    """At the default limits (64 MiB bodies, 10,000 records): 1 MB of 500,000 one-byte lines, and
    an array of 10,001 documents, are refused whole (413, nothing produced or dead-lettered),
    not checked one by one; and an answer names the first 100 refusals, counting them all."""
    dead_before = len(consume(broker, "docs.http.dlq", expected=10_000_000, timeout=2))
    for body, content_type in [
        (b"x\n" * 500_000, "application/x-ndjson"),
        (("[" + ",".join([json.dumps(_doc(0))] * 10_001) + "]").encode(), "application/json"),
    ]:
        response = _post(server, body, content_type)
        assert response.status_code == 413, response.text[:300]
        answer = response.json()
        assert answer["error_code"] == "too_large" and "at most 10,000 records" in answer["message"], answer
    assert len(consume(broker, "docs.http.dlq", expected=10_000_000, timeout=2)) == dead_before

    answer = _post(server, b"not json\n" * 150).json()
    assert (answer["accepted"], answer["refused"], answer["refusals_left_out"]) == (0, 150, 50)
    assert [r["record"] for r in answer["refusals"]] == list(range(100))
    assert len(consume(broker, "docs.http.dlq", expected=dead_before + 150, timeout=10)) == dead_before + 150


def _start(broker: str, tmp_path, *options: str) -> tuple[subprocess.Popen, str]:
    """An ingest server of its own (topic docs.http) with these options: the process and its URL."""
    from registry.local_server import start_service

    return start_service(
        ["ingest-server", "--bootstrap", broker, "--topic", "docs.http", "--dlq-topic", "docs.http.dlq", *options],
        env={"TOKMAINT_REGISTRY_TOKEN": TOKEN},
        log=tmp_path / "ingest.log",
    )


def _upload_head(length: int) -> bytes:
    """A post's head (with the token) announcing a body of ``length`` bytes."""
    return (
        f"POST /v1/streams/docs.http/documents HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/x-ndjson\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


HELD_BODY = json.dumps(_doc(1)).encode().ljust(1000)  # one document, padded


def _held_upload(url: str) -> socket.socket:
    """A post of ``HELD_BODY`` of which only the first byte has come: in flight until the rest does."""
    sock = socket.create_connection(("127.0.0.1", httpx.URL(url).port), timeout=30)
    sock.sendall(_upload_head(len(HELD_BODY)) + HELD_BODY[:1])
    return sock


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends on ``sock`` until it closes it."""
    return b"".join(iter(lambda: sock.recv(65536), b""))


def test_a_stalled_upload_is_answered_408_and_frees_its_place(broker, tmp_path):
    """A server of two places, receive timeout 1 s: two posts whose bodies stop after a byte (the
    token sent) are each answered 408, and their places come back."""
    process, url = _start(
        broker, tmp_path, "--max-in-flight", "2", "--max-in-flight-per-client", "2", "--receive-timeout", "1"
    )
    port = int(url.rsplit(":", 1)[1])
    head = _upload_head(1000) + b"{"
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as first,
            socket.create_connection(("127.0.0.1", port), timeout=30) as second,
        ):
            first.sendall(head)
            second.sendall(head)
            for sock in (first, second):
                answer = _answer(sock)
                assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
                assert b'"error_code":"request_timeout"' in answer.replace(b" ", b"")
        deadline = time.monotonic() + 30
        while (health := httpx.get(f"{url}/healthz").json()).get("in_flight") != 0:
            assert time.monotonic() < deadline, health
            time.sleep(0.05)
        assert _post(url, json.dumps(_doc(0)).encode()).json()["accepted"] == 1
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_health_says_when_the_ingest_server_is_saturated(broker, tmp_path):
    """A server of one place holding an upload: /healthz stays 200 and says saturated, /readyz
    answers 503 until the upload is in, then 200."""
    process, url = _start(broker, tmp_path, "--max-in-flight", "1")
    try:
        assert httpx.get(f"{url}/readyz").status_code == 200
        with _held_upload(url) as held:
            health = until(
                lambda: (r := httpx.get(f"{url}/healthz")).json()["saturated"] and r,
                "the held upload did not saturate the server",
            )
            assert health.status_code == 200 and health.json()["in_flight"] == 1
            ready = httpx.get(f"{url}/readyz")
            assert ready.status_code == 503 and ready.json()["saturated"] is True
            held.sendall(HELD_BODY[1:])
            assert held.recv(65536).startswith(b"HTTP/1.1 200")
        until(lambda: httpx.get(f"{url}/readyz").status_code == 200, "readiness did not come back")
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_client_past_its_share_is_refused_while_another_is_served(broker, tmp_path):
    """A server of four places, so one a client: a client holding an upload is refused a second
    post at once (503, Retry-After, overloaded), while a post from another address, with the same
    write token every writer holds, is served."""
    process, url = _start(broker, tmp_path, "--max-in-flight", "4")
    try:
        with _held_upload(url):
            until(lambda: httpx.get(f"{url}/healthz").json()["in_flight"] == 1, "the upload took no place")
            refused = _post(url, json.dumps(_doc(2)).encode())
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert refused.json()["error_code"] == "overloaded" and "its share" in refused.json()["reasons"][0]
            with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=30) as other:
                served = other.post(
                    f"{url}/v1/streams/docs.http/documents",
                    content=json.dumps(_doc(3)).encode(),
                    headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"},
                )
            assert served.status_code == 200 and served.json()["accepted"] == 1, served.text
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_an_upload_trickled_under_the_rate_floor_is_answered_408(broker, tmp_path):
    """A body sent a byte every 0.1 s (never stalled for the receive timeout of 1 s, but far under
    the 64 KiB/s floor) is answered 408 once the grace has passed, and its place comes back."""
    process, url = _start(broker, tmp_path, "--receive-timeout", "1")
    trickled = threading.Event()

    try:
        with socket.create_connection(("127.0.0.1", httpx.URL(url).port), timeout=30) as slow:
            slow.sendall(_upload_head(100_000))
            sender = threading.Thread(target=trickle_body, args=(slow, trickled), daemon=True)
            sender.start()
            began = time.monotonic()
            answer = _answer(slow)
            trickled.set()
            sender.join(timeout=30)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b'"error_code":"request_timeout"' in answer.replace(b" ", b"") and b"slower than 65,536" in answer
        assert time.monotonic() - began < 10
        until(lambda: httpx.get(f"{url}/healthz").json()["in_flight"] == 0, "the upload kept its place")
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_dates_outside_the_window_nan_and_long_numbers_are_refused_with_the_reason(server, broker):
    """A body that starts with a byte-order mark is read; documents dated 2099, 1960 or at the
    epoch, a ``NaN``, a 5,001-digit number and a record that starts with a byte-order mark are
    each refused with a reason that says what it is, and dead-lettered with it."""
    records = [
        json.dumps(_doc(20, id="bom-first")),
        json.dumps(_doc(21, id="ahead", ts="2099-01-01T00:00:00Z")),
        json.dumps(_doc(22, id="before", ts="1960-06-01T00:00:00Z")),
        json.dumps(_doc(23, id="epoch", ts="1970-01-01T00:00:00Z")),
        json.dumps(_doc(24, id="nan"))[:-1] + ', "score": NaN}',
        json.dumps(_doc(25, id="long"))[:-1] + ', "n": ' + "9" * 5001 + "}",
        "\ufeff" + json.dumps(_doc(26, id="bom-inside")),
    ]
    answer = _post(server, b"\xef\xbb\xbf" + "\n".join(records).encode()).json()
    assert (answer["accepted"], answer["refused"]) == (1, 6), answer
    reasons = {r["record"]: r["reason"] for r in answer["refusals"]}
    assert "ts 2099-01-01T00:00:00+00:00 is more than 86,400 s (--max-future-seconds) ahead" in reasons[1]
    assert reasons[2].startswith("ts 1960-06-01T00:00:00+00:00 is not after the epoch")
    assert reasons[3].startswith("ts 1970-01-01T00:00:00+00:00 is not after the epoch")
    assert reasons[4] == "not JSON (NaN is not a JSON value)"
    assert reasons[5] == "not JSON tokmaint can read (a number 5,001 digits long; at most 4,300)"
    assert reasons[6] == "not JSON (it starts with a byte-order mark, U+FEFF)"
    produced = consume(broker, "docs.http", expected=10_000, timeout=2)
    assert {"bom-first"} == {r.key.decode() for r in produced} & {"bom-first", "ahead", "before", "epoch", "nan"}
    dead = {
        dict(r.headers)["tokmaint.reason"].decode()
        for r in consume(broker, "docs.http.dlq", expected=10_000, timeout=2)
    }
    assert set(reasons.values()) <= dead
    for body, said in ((b"[NaN]", "not JSON (NaN is not a JSON value)"), (b"[" + b"9" * 5001 + b"]", "5,001 digits")):
        refused = _post(server, body, "application/json")
        assert refused.status_code == 422 and said in refused.text, refused.text


def test_a_request_head_trickled_in_is_answered_408_at_the_receive_timeout(broker, tmp_path):
    """A request line and headers sent a byte every 0.1 s (a slowloris): answered 408 and closed
    once --receive-timeout (1 s) has passed, not held for as long as the client likes; the server
    still serves."""
    process, url = _start(broker, tmp_path, "--receive-timeout", "1")
    stop = threading.Event()
    try:
        with socket.create_connection(("127.0.0.1", httpx.URL(url).port), timeout=30) as slow:
            head = _upload_head(10)

            def trickle_head() -> None:
                for byte in head:
                    if stop.is_set():
                        return
                    try:
                        slow.sendall(bytes([byte]))
                    except OSError:  # answered and closed
                        return
                    time.sleep(0.1)

            sender = threading.Thread(target=trickle_head, daemon=True)
            began = time.monotonic()
            sender.start()
            answer = _answer(slow)
            stop.set()
            sender.join(timeout=30)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"the request's line and headers took more than 1 s" in answer
        assert time.monotonic() - began < 5
        assert httpx.get(f"{url}/healthz").status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=30)
