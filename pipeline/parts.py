"""The other parts a command needs (Redis, the Kafka broker), waited for a bounded time.

A command started before Redis or the broker is up (a compose stack starting, a restart) waits up
to ``--wait`` seconds (default ``DEFAULT_WAIT_SECONDS``), saying once what it waits for, then
stops with one line naming the part and its address (:class:`PartUnavailable`, exit 2). A bad
address is refused at once.

>>> try:
...     connect_redis("http://127.0.0.1:1", wait=0)
... except PartUnavailable as exc:
...     print(exc)
Redis: 'http://127.0.0.1:1' is not a Redis URL (Redis URL must specify one of the following schemes (redis://, \
rediss://, unix://))
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from tokenizer_service.errors import TokmaintError

if TYPE_CHECKING:
    import redis

DEFAULT_WAIT_SECONDS = 30.0
T = TypeVar("T")
log = logging.getLogger("tokmaint.parts")


class PartUnavailable(TokmaintError):
    """A part the command needs did not answer in time, or its address is no address."""


def wait_for(part: str, attempt: Callable[[], T], *, wait: float, errors: tuple[type[BaseException], ...]) -> T:
    """``attempt()`` until it returns, retrying ``errors`` with backoff for up to ``wait`` seconds.

    >>> wait_for("a part at nowhere", lambda: 1 / 0, wait=0, errors=(ZeroDivisionError,))
    Traceback (most recent call last):
    ...
    pipeline.parts.PartUnavailable: a part at nowhere did not answer in 0 s (ZeroDivisionError: division by zero)
    """
    deadline, pause, said = time.monotonic() + wait, 0.25, False
    while True:
        try:
            return attempt()
        except errors as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PartUnavailable(f"{part} did not answer in {wait:g} s ({type(exc).__name__}: {exc})") from None
            if not said:
                log.warning(
                    "waiting %s for %s (%s)",
                    "as long as it takes" if wait == float("inf") else f"up to {left:.0f} s",
                    part,
                    exc,
                )
                said = True
            time.sleep(min(pause, left))
            pause = min(pause * 2, 5.0)


def connect_redis(url: str, *, wait: float = DEFAULT_WAIT_SECONDS) -> redis.Redis | redis.RedisCluster:
    """A client of the Redis at ``url`` that has answered a PING; when that server is a node of a
    Redis Cluster, a cluster client, which sends each lineage's keys (one hash tag, one slot) to
    the node that holds them."""
    import redis  # here: a command's --help needs no Redis client

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5)
    except ValueError as exc:
        raise PartUnavailable(f"Redis: {url!r} is not a Redis URL ({exc})") from None
    wait_for(f"Redis at {url}", client.ping, wait=wait, errors=(redis.ConnectionError, redis.TimeoutError))
    if client.info("cluster").get("cluster_enabled"):
        client.close()
        client = redis.RedisCluster.from_url(url, socket_connect_timeout=5)
    return client


def wait_for_broker(bootstrap: str, *, wait: float = DEFAULT_WAIT_SECONDS, topic: str | None = None) -> None:
    """Return once the Kafka broker at ``bootstrap`` answers a metadata request (and, given a
    ``topic``, holds it: a job that is to read a topic to its end has nothing to read without it)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": logging.getLogger("tokmaint.kafka")})

    def metadata() -> None:
        try:
            topics = admin.list_topics(timeout=min(5.0, max(wait, 0.5))).topics
        except Exception as exc:  # KafkaException: no broker answered
            raise ConnectionError(str(exc)) from None
        if topic is not None and topic not in topics:
            raise LookupError(f"no topic {topic!r} there yet: nothing was sent to it (check --topic)")

    part = f"the Kafka broker at {bootstrap}" + (f" with topic {topic!r}" if topic else "")
    wait_for(part, metadata, wait=wait, errors=(ConnectionError, LookupError))


def wait_for_registry(url: str, *, wait: float = DEFAULT_WAIT_SECONDS) -> None:
    """Return once the registry at ``url`` answers its health check."""
    import httpx

    def healthy() -> None:
        try:
            httpx.get(f"{url.rstrip('/')}/healthz", timeout=5).raise_for_status()
        except httpx.HTTPError as exc:
            raise ConnectionError(str(exc) or type(exc).__name__) from None

    wait_for(f"the registry at {url}", healthy, wait=wait, errors=(ConnectionError,))
