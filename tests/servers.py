"""The servers the tests talk to: Redis, PostgreSQL and the Kafka-protocol broker, each a
container of the stand-in images (``containers/standins.sh``) started with ``testcontainers``
where a Docker engine answers, else a local binary. The session's header says which, and why.

``TOKMAINT_TEST_SERVERS`` chooses: ``containers`` (``make test``: an engine that does not
answer fails the tests that need a server), ``local`` (the binaries), unset (containers where an
engine answers and the images are built). Ports are published on 127.0.0.1 only.

    def test_counts(redis_url, broker, postgres_url): ...

A Redis Cluster (``redis_cluster``) stays local binaries: its nodes announce addresses that a
container's published ports would not match.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tokenizer_service.errors import TokmaintError

IMAGES = {"broker": "tokmaint-kafka:tansu", "redis": "tokmaint-redis:bookworm", "postgres": "tokmaint-postgres:15"}
CHOICES = ("containers", "local")
READY_SECONDS = 60.0  # a container's server answers within this (PostgreSQL's first start makes its data)


@functools.cache
def local_reason() -> str | None:
    """Why the servers are local binaries (None: they are containers). Raises where
    ``TOKMAINT_TEST_SERVERS=containers`` and no container can be had."""
    choice = os.environ.get("TOKMAINT_TEST_SERVERS", "")
    if choice and choice not in CHOICES:
        raise TokmaintError(f"TOKMAINT_TEST_SERVERS={choice!r}: must be one of {', '.join(CHOICES)}")
    if choice == "local":
        return "TOKMAINT_TEST_SERVERS=local"
    reason = _engine_reason()
    if reason is not None and choice == "containers":
        raise TokmaintError(f"TOKMAINT_TEST_SERVERS=containers, but {reason}")
    return reason


def _engine_reason() -> str | None:
    """Why no stand-in container can be started here (None: they can)."""
    # The reaper (Ryuk) is an image of its own, pulled from a registry; the fixtures stop their
    # containers themselves.
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    import docker

    where = os.environ.get("DOCKER_HOST", "the default socket")
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # docker.errors.DockerException and what the transport raises
        return f"no Docker engine answers at {where} ({type(exc).__name__}); `make engine` starts one"
    try:
        missing = [image for image in IMAGES.values() if not client.images.list(name=image)]
    finally:
        client.close()
    if missing:
        return f"the stand-in images {', '.join(missing)} are not built (containers/standins.sh; make test builds them)"
    return None


def pytest_report_header(config: pytest.Config) -> str:
    """What the session's servers are, and why (also the last line of a quiet run's summary)."""
    try:
        reason = local_reason()
    except TokmaintError as exc:
        return f"servers: none ({exc})"
    where = os.environ.get("DOCKER_HOST", "the default socket")
    return (
        f"servers: local binaries ({reason})"
        if reason
        else f"servers: containers of the stand-in images (testcontainers, engine at {where})"
    )


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    terminalreporter.write_line(pytest_report_header(config))


def _containers() -> bool:
    """True where the servers are containers; a test fails, saying why, where they must be and cannot."""
    try:
        return local_reason() is None
    except TokmaintError as exc:
        pytest.fail(str(exc))


def _local(start: Callable[[], tuple[Any, str]]) -> Iterator[str]:
    """Start a local server with ``start`` (``pipeline.local_servers``), yield its address, stop
    it; a server that cannot start skips the tests that need it, saying why."""
    try:
        process, address = start()
    except TokmaintError as exc:
        pytest.skip(str(exc))
    yield address
    process.terminate()
    process.wait(timeout=30)


def _container(container: Any, address: str, ready: Callable[[], object]) -> Iterator[str]:
    """Start ``container``, wait with ``ready()`` (``pipeline.parts``' waits: they raise
    PartUnavailable when it does not answer in time), yield ``address``, remove the container."""
    from pipeline.parts import PartUnavailable

    container.start()
    try:
        try:
            ready()
        except PartUnavailable as exc:
            out, err = container.get_logs()
            raise TokmaintError(f"{container.image}: {exc}: {(out + err).decode(errors='replace')[-500:]}") from None
        yield address
    finally:
        container.stop()


def _loopback(container: Any, port: int) -> tuple[Any, int]:
    """``container`` with ``port`` published on a free port of 127.0.0.1 (only)."""
    from registry.local_server import free_port

    host = free_port()
    # with_bind_ports takes no address to bind; docker's API takes (address, port).
    container.ports[f"{port}/tcp"] = ("127.0.0.1", host)
    return container, host


def _stand_in(
    start: Callable[[], tuple[Any, str]],
    image: str,
    port: int,
    setup: Callable[[Any, int], str],
    ready: Callable[[str], object],
) -> Iterator[str]:
    """A server of the session's own, yielding its address: a local binary that ``start`` runs
    (``_local``), or a container of the stand-in ``IMAGES[image]`` with ``port`` published on
    127.0.0.1, to which ``setup(container, host_port)`` gives what it needs before it starts and
    returns its address, and which ``ready(address)`` waits for (``_container``)."""
    if not _containers():
        yield from _local(start)
        return
    from testcontainers.core.container import DockerContainer

    container, host_port = _loopback(DockerContainer(IMAGES[image]), port)
    address = setup(container, host_port)
    yield from _container(container, address, lambda: ready(address))


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """A Kafka-protocol broker of the session's own (tansu, memory storage): its address."""
    from pipeline.local_servers import start_broker
    from pipeline.parts import wait_for_broker

    def advertised(container: Any, port: int) -> str:
        container.with_env("ADVERTISED_LISTENER_URL", f"tcp://127.0.0.1:{port}")
        return f"127.0.0.1:{port}"

    # The engine's proxy accepts connections before the broker listens: a metadata answer says it is up.
    yield from _stand_in(
        start_broker, "broker", 9092, advertised, lambda address: wait_for_broker(address, wait=READY_SECONDS)
    )


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A redis-server of the session's own (nothing kept on disk): its URL."""
    from pipeline.local_servers import start_redis
    from pipeline.parts import connect_redis

    def in_memory(container: Any, port: int) -> str:
        container.with_command(["redis-server", "--save", "", "--appendonly", "no", "--protected-mode", "no"])
        return f"redis://127.0.0.1:{port}/0"

    yield from _stand_in(
        start_redis, "redis", 6379, in_memory, lambda url: connect_redis(url, wait=READY_SECONDS).close()
    )


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server for the session (its superuser's URL, no database named): a container
    of its own, or the local server on 127.0.0.1:5432 (``make services`` starts it)."""
    import psycopg2

    if not _containers():
        try:
            psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres", connect_timeout=5).close()
        except psycopg2.OperationalError as exc:
            pytest.skip(f"no PostgreSQL at 127.0.0.1:5432 ({str(exc).strip()}); `make test` starts the local one")
        yield "postgresql+psycopg2://postgres@127.0.0.1:5432"
        return
    from testcontainers.core.container import DockerContainer

    from pipeline.parts import wait_for

    password = uuid.uuid4().hex
    container, port = _loopback(DockerContainer(IMAGES["postgres"]), 5432)
    container.with_envs(POSTGRES_USER="postgres", POSTGRES_PASSWORD=password, POSTGRES_DB="postgres")

    def connect() -> None:
        psycopg2.connect(
            host="127.0.0.1", port=port, user="postgres", password=password, dbname="postgres", connect_timeout=2
        ).close()

    yield from _container(
        container,
        f"postgresql+psycopg2://postgres:{password}@127.0.0.1:{port}",
        lambda: wait_for(
            f"PostgreSQL at 127.0.0.1:{port}", connect, wait=READY_SECONDS, errors=(psycopg2.OperationalError,)
        ),
    )


@pytest.fixture(scope="session")
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A database of its own on ``postgres_server``, dropped after the session: its URL."""
    from sqlalchemy import create_engine, text

    name = f"tokmaint_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(f"{postgres_server}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield f"{postgres_server}/{name}"
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A three-node Redis Cluster of the session's own (redis-server binaries on free loopback
    ports, the slots split evenly): the URL of one node."""
    from pipeline.local_servers import start_redis_cluster

    try:
        servers, url = start_redis_cluster(tmp_path_factory.mktemp("redis-cluster"))
    except TokmaintError as exc:
        pytest.skip(str(exc))
    yield url
    for process in servers:
        process.terminate()
    for process in servers:
        process.wait(timeout=30)
