"""Past its limit of requests in flight a server refuses one more at once (503, Retry-After, the
one error shape) and serves the rest: tried on a real registry server holding one request open."""

import re
import secrets
import socket
import time

import httpx

from registry.local_server import start_server

TOKEN = secrets.token_hex(16)


def test_a_request_past_the_limit_is_refused_at_once_and_the_held_one_completes(tmp_path):
    process, url = start_server(tmp_path, env={"TOKMAINT_REGISTRY_TOKEN": TOKEN,
                                               "TOKMAINT_REGISTRY_MAX_IN_FLIGHT": "1"})
    try:
        assert httpx.get(f"{url}/v1/tokenizers").status_code == 200
        with socket.create_connection(("127.0.0.1", httpx.URL(url).port), timeout=30) as held:
            # A publish whose body has not all come: in flight until it does.
            held.sendall(f"POST /v1/tokenizers HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {TOKEN}\r\n"
                         "Content-Type: application/json\r\nContent-Length: 10\r\n\r\n{".encode())
            deadline = time.monotonic() + 30
            while (refused := httpx.get(f"{url}/v1/tokenizers")).status_code != 503:
                assert time.monotonic() < deadline, "the held request never took the one place"
                time.sleep(0.05)
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error_code"] == "overloaded" and refused.json()["reasons"]
            assert httpx.get(f"{url}/healthz").status_code == 200  # health checks are not counted
            held.sendall(b"123456789")
            status = int(held.recv(65536).split(b"\r\n", 1)[0].split()[1])
        assert status == 422  # the held request was served (its body is no JSON), not dropped
        assert httpx.get(f"{url}/v1/tokenizers").status_code == 200  # its place is free again
        metrics = httpx.get(f"{url}/metrics").text
        shed = re.search(r'tokmaint_registry_requests_total\{method="GET",route="overloaded",status="503"\} (\S+)',
                         metrics)
        assert shed and float(shed[1]) >= 1
    finally:
        process.terminate()
        process.wait(timeout=30)
