"""Past its limit of requests in flight a server refuses one more at once (503, Retry-After, the
one error shape) and serves the rest: tried on a real registry server holding one request open."""

import re
import secrets
import socket
import threading

import httpx
import pytest

from registry.local_server import start_server
from tests.conftest import trickle_body
from tests.support.polling import until

TOKEN = secrets.token_hex(16)


@pytest.fixture
def one_place(tmp_path):
    """A registry server of one place for requests in flight: its URL."""
    process, url = start_server(
        tmp_path, env={"TOKMAINT_REGISTRY_TOKEN": TOKEN, "TOKMAINT_REGISTRY_MAX_IN_FLIGHT": "1"}
    )
    yield url
    process.terminate()
    process.wait(timeout=30)


def _publish_head(length: int) -> bytes:
    """A publish's head (with the token) announcing a JSON body of ``length`` bytes."""
    return (
        f"POST /v1/tokenizers HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_a_request_past_the_limit_is_refused_at_once_and_the_held_one_completes(one_place):
    url = one_place
    assert httpx.get(f"{url}/v1/tokenizers").status_code == 200
    with socket.create_connection(("127.0.0.1", httpx.URL(url).port), timeout=30) as held:
        # A publish whose body has not all come: in flight until it does.
        held.sendall(_publish_head(10) + b"{")
        refused = until(
            lambda: (r := httpx.get(f"{url}/v1/tokenizers")).status_code == 503 and r,
            "the held request never took the one place",
        )
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error_code"] == "overloaded" and refused.json()["reasons"]
        assert httpx.get(f"{url}/healthz").status_code == 200  # health checks are not counted
        held.sendall(b"123456789")
        assert _status(held) == 422  # the held request was served (its body is not JSON), not dropped
    assert httpx.get(f"{url}/v1/tokenizers").status_code == 200  # its place is free again
    metrics = httpx.get(f"{url}/metrics").text
    shed = re.search(r'tokmaint_registry_requests_total\{method="GET",route="overloaded",status="503"\} (\S+)', metrics)
    assert shed and float(shed[1]) >= 1


def _status(sock: socket.socket) -> int:
    """The status of the answer a raw socket reads (its first line)."""
    return int(sock.recv(65536).split(b"\r\n", 1)[0].split()[1])


def _elsewhere(url: str, path: str) -> httpx.Response:
    """A GET from another loopback address (127.0.0.2): another client than the raw sockets'."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=30) as client:
        return client.get(f"{url}{path}")


def _serve_weights(tmp_path, monkeypatch, capsys, *, send_timeout: int):
    """A registry server of eight places giving up a response after ``send_timeout`` seconds,
    with a model of 3.6 MB of weights published beside lineage ``big``'s first version (streamed
    from the store: the cache is 16 KB): the process and its URL."""

    from tests.support.models import tiny_model

    from registry.client import RegistryClient
    from tests.conftest import sentences
    from tokenizer_service.bpe import BPETokenizer
    from tokmaint.cli import main
    from trainer.export import write_model_folder

    env = {
        "TOKMAINT_REGISTRY_TOKEN": TOKEN,
        "TOKMAINT_REGISTRY_MAX_IN_FLIGHT": "8",
        "TOKMAINT_REGISTRY_SEND_TIMEOUT": str(send_timeout),
        "TOKMAINT_REGISTRY_CACHE_MB": str(16 / 1024),
    }
    process, url = start_server(tmp_path / "registry", env=env)
    try:
        tokenizer = BPETokenizer.train(sentences(300), vocab_size=330, special_tokens=["<|endoftext|>"])
        RegistryClient(url, token=TOKEN).create("big", tokenizer.to_json())
        model = tiny_model(tokenizer.id_space, n_embd=256)
        write_model_folder(model, tokenizer, {"lineage": "big", "version": 1}, tmp_path / "model")
        assert (tmp_path / "model" / "model.safetensors").stat().st_size > 3 << 20  # several pieces of 1 MB
        monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", TOKEN)
        assert main(["registry", "publish-model", "big", "--model", str(tmp_path / "model"), "--registry", url]) == 0
        capsys.readouterr()
    except BaseException:
        process.terminate()
        raise
    return process, url


def _slow_reader(url: str, *, source: str = "127.0.0.1") -> socket.socket:
    """A client from ``source`` that asks for the model's weights and takes nothing."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window is agreed then
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", httpx.URL(url).port))
    sock.sendall(b"GET /big-models/resolve/main/model.safetensors HTTP/1.1\r\nHost: test\r\n\r\n")
    return sock


def test_slow_readers_lose_their_places_and_every_other_client_is_served(tmp_path, monkeypatch, capsys):
    """Eight clients ask for a model's weights (3.6 MB, streamed) and never read them, from one
    address, on a server of eight places: they hold at most their share (two) until the send
    timeout gives them up; a client elsewhere is served meanwhile, /healthz counts the places,
    and they all come back while the readers still sit on their sockets."""
    process, url = _serve_weights(tmp_path, monkeypatch, capsys, send_timeout=1)
    slow: list[socket.socket] = []
    try:
        slow += [_slow_reader(url) for _ in range(8)]
        until(lambda: httpx.get(f"{url}/v1/tokenizers").status_code == 503, "the readers took no place")
        assert _elsewhere(url, "/v1/tokenizers").status_code == 200  # another client: served meanwhile
        held = httpx.get(f"{url}/healthz").json()
        assert held["limit"] == 8 and held["in_flight"] <= 2 and held["saturated"] is False
        # Given up after the send timeout: every place comes back while the readers still sit there.
        # The two are given up one watcher round apart at most: wait for both, not the first.
        until(lambda: httpx.get(f"{url}/healthz").json()["in_flight"] == 0, "the readers kept their places")
        assert httpx.get(f"{url}/v1/tokenizers").status_code == 200
        assert b"the client took nothing for 1 s" in (tmp_path / "registry" / "server.log").read_bytes()
    finally:
        for sock in slow:
            sock.close()
        process.terminate()
        process.wait(timeout=30)


def test_slow_readers_of_many_hosts_keep_no_place_from_others(tmp_path, monkeypatch, capsys):
    """Slow readers from four addresses, each at its share (two of eight places): all eight
    places would be theirs until the send timeout (30 s here); a response that waits for its
    client keeps no place, so a fifth client is served at once, and /healthz counts them as
    stalled, not saturated."""
    process, url = _serve_weights(tmp_path, monkeypatch, capsys, send_timeout=30)
    slow: list[socket.socket] = []
    try:
        for host in range(3, 7):
            slow += [_slow_reader(url, source=f"127.0.0.{host}") for _ in range(2)]
        until(lambda: httpx.get(f"{url}/healthz").json()["in_flight"] == 8, "the readers took no place")
        # Each reader's first piece of the weights is sent, and then its response waits for it.
        until(lambda: httpx.get(f"{url}/healthz").json()["stalled"] == 8, "the readers' responses never stalled")
        for _ in range(5):
            assert _elsewhere(url, "/v1/tokenizers").status_code == 200
            assert _elsewhere(url, "/big/resolve/main/tokenizer.json").status_code == 200
        health = httpx.get(f"{url}/healthz").json()
        assert (health["in_flight"], health["stalled"], health["saturated"]) == (8, 8, False)
    finally:
        for sock in slow:
            sock.close()
        process.terminate()
        process.wait(timeout=30)


def test_stalled_and_trickling_uploads_are_answered_408_and_free_their_places(tmp_path):
    """A publish whose body stops after a byte, and one sent a byte every 0.1 s (too slow, never
    quite stalled), each with the token, on a server of two places: both are answered 408 after
    the receive timeout (2 s here) and their places come back; meanwhile a client elsewhere is
    served."""
    process, url = start_server(
        tmp_path,
        env={
            "TOKMAINT_REGISTRY_TOKEN": TOKEN,
            "TOKMAINT_REGISTRY_MAX_IN_FLIGHT": "2",
            "TOKMAINT_REGISTRY_MAX_IN_FLIGHT_PER_CLIENT": "2",
            "TOKMAINT_REGISTRY_RECEIVE_TIMEOUT": "2",
        },
    )
    head = _publish_head(100000)
    port = httpx.URL(url).port
    trickled = threading.Event()

    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as stalled,
            socket.create_connection(("127.0.0.1", port), timeout=30) as slow,
        ):
            stalled.sendall(head + b"{")
            slow.sendall(head)
            sender = threading.Thread(target=trickle_body, args=(slow, trickled), daemon=True)
            sender.start()
            until(lambda: _elsewhere(url, "/v1/tokenizers").status_code == 503, "the uploads took no place")
            for sock in (stalled, slow):
                answer = b"".join(iter(lambda: sock.recv(65536), b""))  # to its end: the server closes
                assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
                assert b'"error_code":"request_timeout"' in answer.replace(b" ", b"")
            trickled.set()
            sender.join(timeout=30)
        until(lambda: _elsewhere(url, "/v1/tokenizers").status_code == 200, "an upload kept its place")
        assert httpx.get(f"{url}/healthz").json()["in_flight"] == 0
        assert httpx.get(f"{url}/v1/tokenizers").status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_health_says_when_the_server_is_saturated(one_place):
    """A server of one place holding an upload: /healthz stays 200 (liveness) and says
    saturated; /readyz answers 503 until the place is free, then 200."""
    url = one_place
    assert httpx.get(f"{url}/readyz").status_code == 200
    with socket.create_connection(("127.0.0.1", httpx.URL(url).port), timeout=30) as held:
        held.sendall(_publish_head(2) + b"{")
        health = until(
            lambda: (r := httpx.get(f"{url}/healthz")).json().get("saturated") and r,
            "the held upload did not saturate the server",
        )
        assert health.status_code == 200
        assert health.json() | {"refused": 0} == {
            "status": "saturated",
            "in_flight": 1,
            "stalled": 0,
            "limit": 1,
            "watches": 0,
            "max_watches": 256,
            "saturated": True,
            "refused": 0,
        }
        ready = httpx.get(f"{url}/readyz")
        assert ready.status_code == 503 and ready.json()["saturated"] is True
        held.sendall(b"}")
        assert _status(held) == 422
    until(lambda: httpx.get(f"{url}/readyz").status_code == 200, "readiness did not come back")


def _watch(url: str, *, source: str, token: str | None = None) -> socket.socket:
    """A client from ``source`` (with ``token`` as its bearer token, if any) watching lineage
    ``watched`` for a version after its first, for 30 s: it holds a watch until it closes."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", httpx.URL(url).port))
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    sock.sendall(f"GET /v1/tokenizers/watched/watch?after=1&timeout=30 HTTP/1.1\r\nHost: test\r\n{auth}\r\n".encode())
    return sock


def test_a_client_holds_its_share_of_the_watches_and_a_full_pool_is_saturated(tmp_path):
    """Eight watches at most, so two a client (its address; its token, where it sends one): a
    third from one address, or from anywhere with a token that holds two, is refused 503 at
    once while another client's watch is taken; once all eight are held /healthz says
    saturated and /readyz answers 503, until one goes."""
    from registry.client import RegistryClient
    from tests.conftest import sentences
    from tokenizer_service.bpe import BPETokenizer

    process, url = start_server(tmp_path, env={"TOKMAINT_REGISTRY_TOKEN": TOKEN, "TOKMAINT_REGISTRY_MAX_WATCHES": "8"})
    watches: list[socket.socket] = []
    try:
        RegistryClient(url, token=TOKEN).create("watched", BPETokenizer.train(sentences(200), vocab_size=290).to_json())
        watches += [_watch(url, source="127.0.0.1") for _ in range(2)]
        until(lambda: httpx.get(f"{url}/healthz").json()["watches"] == 2, "the watches were not taken")
        refused = httpx.get(f"{url}/v1/tokenizers/watched/watch", params={"after": 1, "timeout": 1})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error_code"] == "overloaded"
        assert "this client has 2 watches waiting, its share of the server's 8" in refused.json()["reasons"][0]
        assert _elsewhere(url, "/v1/tokenizers/watched/watch?after=1&timeout=1").status_code == 204  # another client
        watches += [_watch(url, source="127.0.0.3", token="shared") for _ in range(2)]
        until(lambda: httpx.get(f"{url}/healthz").json()["watches"] == 4, "the token's watches were not taken")
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.4"), timeout=30) as client:
            by_token = client.get(
                f"{url}/v1/tokenizers/watched/watch",
                params={"after": 1, "timeout": 1},
                headers={"Authorization": "Bearer shared"},
            )
        assert by_token.status_code == 503 and by_token.json()["error_code"] == "overloaded"
        assert httpx.get(f"{url}/readyz").status_code == 200
        watches += [_watch(url, source=f"127.0.0.{host}") for host in (5, 6) for _ in range(2)]
        health = until(lambda: (r := httpx.get(f"{url}/healthz")).json()["watches"] == 8 and r, "the pool did not fill")
        assert health.status_code == 200 and health.json()["saturated"] is True and health.json()["in_flight"] == 0
        ready = httpx.get(f"{url}/readyz")
        assert ready.status_code == 503 and ready.json()["saturated"] is True
        watches.pop().close()
        until(lambda: httpx.get(f"{url}/readyz").status_code == 200, "readiness did not come back")
    finally:
        for sock in watches:
            sock.close()
        process.terminate()
        process.wait(timeout=30)
