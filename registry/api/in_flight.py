"""At most ``Limits.requests`` requests in flight, at most ``Limits.per_client`` of them from one
client, and at most ``Limits.watches`` watches, at most ``Limits.watches_per_client`` of them from
one client; one more is refused at once with 503 and
``Retry-After`` (``{error_code: "overloaded", ...}``) instead of waiting in a queue that grows
without bound: past its capacity a server keeps answering in time the requests it takes, and a
client knows to come back.

A place is held only while the request is served in time: a response that waits for its client
to read keeps no place from other clients (up to four times the places in all: each costs a
socket and a piece of its body), and one the client does not read
for ``send_timeout`` seconds is given up (its connection closed) and a request body that stalls
for ``receive_timeout`` seconds, or arrives slower than ``min_upload_rate`` bytes a second past
that grace, is answered 408: slow clients cannot keep the places. Health checks and metrics are
not counted (``/healthz`` reports the counts and whether the server is saturated: every request
place, or every watch, taken).

    app.add_middleware(InFlightLimit, state=InFlight(Limits(requests=64)))
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from registry.api.errors import error_body

UNCOUNTED = frozenset(("/healthz", "/readyz", "/metrics"))
STALLED_PER_PLACE = 4  # requests held in all (stalled sends included), per place
SHED_ROUTE = SimpleNamespace(path="overloaded")  # the route label a refused request is counted under
log = logging.getLogger("tokmaint.in_flight")
# FastAPI(telemetry=NO_TELEMETRY): FastAPI's own OpenTelemetry asks the environment for providers
# on every request (a quarter of a revalidation's time); the servers count requests with Prometheus.
NO_TELEMETRY = {"tracing": False, "metrics": False, "logs": False}


@dataclass(frozen=True)
class Limits:
    """What a server takes at once, and how long it waits for a slow client.

    >>> Limits(requests=8).per_client, Limits(requests=64).per_client, Limits(watches=8).watches_per_client
    (2, 16, 2)
    """

    requests: int = 64
    # One client's share (its peer address, and its bearer token where it sends one); None: a quarter.
    per_client: int | None = None
    watches: int = 256
    # One client's share of the watches, counted as per_client is; None: a quarter.
    watches_per_client: int | None = None
    send_timeout: float = 30.0
    receive_timeout: float = 15.0
    min_upload_rate: float = 64 * 1024  # bytes/s once receive_timeout has passed; 0: no floor

    def __post_init__(self) -> None:
        if self.per_client is None:
            object.__setattr__(self, "per_client", max(1, self.requests // 4))
        if self.watches_per_client is None:
            object.__setattr__(self, "watches_per_client", max(1, self.watches // 4))


class BodyTimeout(Exception):
    """A request body stalled or came too slowly (answered 408)."""


class SendTimeout(Exception):
    """The client did not take the response in time (the connection is closed)."""


class StalledSends:
    """The requests whose response waits for its client to read, and since when. One watcher
    task gives up (cancels) those past ``timeout``: a timer per send would cost a revalidation
    a third of its time.

    >>> async def demo():
    ...     sends = StalledSends(0.05)
    ...     sends.start()
    ...     stalled = asyncio.ensure_future(asyncio.sleep(10))
    ...     await asyncio.sleep(0)
    ...     sends.waiting[stalled] = time.monotonic()
    ...     await asyncio.sleep(0.2)
    ...     return stalled.cancelled(), sends.gave_up(stalled)
    >>> asyncio.run(demo())
    (True, True)
    """

    def __init__(self, timeout: float, waiting: dict[asyncio.Task, float] | None = None) -> None:
        self.timeout = timeout
        self.waiting: dict[asyncio.Task, float] = {} if waiting is None else waiting
        self._given_up: set[asyncio.Task] = set()
        self.watcher: asyncio.Task | None = None

    def start(self) -> None:
        self.watcher = asyncio.ensure_future(self._watch())

    def gave_up(self, task: asyncio.Task) -> bool:
        """Whether ``task`` was cancelled here (then it is no longer cancelled: it ends as it chooses)."""
        if task not in self._given_up:
            return False
        self._given_up.discard(task)
        task.uncancel()
        return True

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.timeout / 4))
            now = time.monotonic()
            for task, since in list(self.waiting.items()):
                if now - since > self.timeout and task not in self._given_up:
                    self._given_up.add(task)
                    task.cancel()


class Shares:
    """What each client holds of one kind of place: a client is its peer address and, where it
    sends one, its bearer token (``Authorization``'s value); it may take one more while both hold
    under ``share`` (a token used from many hosts is one client, as is a host of many tokens).

    >>> shares = Shares(1)
    >>> shares.take("a"), shares.take("a"), shares.take("b", b"Bearer t"), shares.take("c", b"Bearer t")
    (True, False, True, False)
    >>> shares.give_back("a"); shares.take("a")
    True
    """

    def __init__(self, share: int) -> None:
        self.share = share
        self.by_peer: dict[str | None, int] = {}
        self.by_token: dict[bytes, int] = {}

    def take(self, peer: str | None, token: bytes | None = None) -> bool:
        by_peer, by_token = self.by_peer, self.by_token
        held = by_peer.get(peer, 0)
        if held >= self.share or (token is not None and by_token.get(token, 0) >= self.share):
            return False
        by_peer[peer] = held + 1
        if token is not None:
            by_token[token] = by_token.get(token, 0) + 1
        return True

    def give_back(self, peer: str | None, token: bytes | None = None) -> None:
        _drop_one(self.by_peer, peer)
        if token is not None:
            _drop_one(self.by_token, token)


def _drop_one(held: dict, key: Any) -> None:
    """One fewer held by ``key`` (none left: no entry, so the dict holds only who holds places).

    >>> held = {"a": 2}
    >>> _drop_one(held, "a"); held
    {'a': 1}
    >>> _drop_one(held, "a"); held
    {}
    """
    if (left := held[key] - 1) > 0:
        held[key] = left
    else:
        del held[key]


class InFlight:
    """The counts of one server, read by its ``/healthz``; they live on the event loop's one
    thread (no lock). A request counts against its client's share of the places
    (``Limits.per_client``), a watch against its share of the watches (``Limits.watches_per_client``).
    The server's own write token (``write_token``) is every writer's: it names no client, so a
    request that sends it counts by its address alone (else all writers together would hold one
    client's share).

    >>> state = InFlight(Limits(requests=2, per_client=1))
    >>> state.take("a"), state.take("a"), state.take("b", b"Bearer t"), state.take("c", b"Bearer t")
    (None, 'held', None, 'full')
    >>> state.give_back("a"); state.take("c", b"Bearer t")
    'held'
    >>> state.health()["in_flight"], state.health()["saturated"]
    (1, False)
    """

    def __init__(self, limits: Limits, *, write_token: str | None = None) -> None:
        self.limits = limits
        self.write_token = None if write_token is None else f"Bearer {write_token}".encode()
        self.requests = self.watches = 0
        # The requests whose response waits for its client to read, and since when (StalledSends').
        self.stalled: dict[asyncio.Task, float] = {}
        self.working = Shares(limits.per_client)
        self.watching = Shares(limits.watches_per_client)
        self.refused = 0

    def take(self, peer: str | None, token: bytes | None = None, *, watch: bool = False) -> str | None:
        """Take a place for a request; None, or why not (``full``, ``held``: the client's share)."""
        limits = self.limits
        if watch:  # bounded apart from the requests (a watch waits, and holds no worker), with a share of its own
            if self.watches >= limits.watches:
                return "full"
            if not self.watching.take(peer, token):
                return "held"
            self.watches += 1
            return None
        # A response that waits for its client to read costs a socket and one piece of its body,
        # not a worker: it keeps no place from other clients (a few hosts of slow readers would
        # otherwise take them all), up to STALLED_PER_PLACE times the places in all; a client's
        # share counts it still.
        if self.requests - len(self.stalled) >= limits.requests or self.requests >= limits.requests * STALLED_PER_PLACE:
            return "full"
        if not self.working.take(peer, token):
            return "held"
        self.requests += 1
        return None

    def give_back(self, peer: str | None, token: bytes | None = None, *, watch: bool = False) -> None:
        if watch:
            self.watches -= 1
            self.watching.give_back(peer, token)
            return
        self.requests -= 1
        self.working.give_back(peer, token)

    def health(self) -> dict[str, Any]:
        """What ``/healthz`` says of the load: ``saturated`` once every request place, or every
        watch, is taken (one more of either would be refused).

        >>> state = InFlight(Limits(watches=1))
        >>> state.take("a", watch=True), state.health()["saturated"]
        (None, True)
        """
        limits, working = self.limits, self.requests - len(self.stalled)
        saturated = (
            working >= limits.requests
            or self.requests >= limits.requests * STALLED_PER_PLACE
            or self.watches >= limits.watches
        )
        return {
            "status": "saturated" if saturated else "ok",
            "in_flight": self.requests,
            "stalled": len(self.stalled),
            "limit": self.limits.requests,
            "watches": self.watches,
            "max_watches": self.limits.watches,
            "saturated": saturated,
            "refused": self.refused,
        }


def is_watch(path: str) -> bool:
    """Whether a request is a watch (counted apart from the places).

    >>> is_watch("/v1/tokenizers/git/watch"), is_watch("/git/resolve/main/watch")
    (True, False)
    """
    return path.startswith("/v1/tokenizers/") and path.endswith("/watch")


def read_headers(scope: Scope) -> tuple[bytes | None, bool]:
    """A request's bearer token (``Authorization``'s value, if any) and whether it may have a
    body, in one scan of its headers.

    >>> read_headers({"method": "GET", "headers": [(b"authorization", b"Bearer x")]})
    (b'Bearer x', False)
    >>> read_headers({"method": "GET", "headers": [(b"content-length", b"5")]})
    (None, True)
    """
    token, body = None, scope["method"] not in ("GET", "HEAD")
    for name, value in scope["headers"]:
        if name == b"authorization":
            token = value
        elif name == b"content-length" or name == b"transfer-encoding":
            body = body or value != b"0"
    return token, body


def _refusal(status: int, code: str, reason: str, *headers: tuple[bytes, bytes]) -> tuple[Message, Message]:
    body = json.dumps(error_body(code, [reason])).encode()
    return (
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
        },
        {"type": "http.response.body", "body": body},
    )


class InFlightLimit:
    """A plain ASGI middleware (no per-request objects beyond two small closures)."""

    def __init__(self, app: ASGIApp, *, state: InFlight, retry_after: int = 1) -> None:
        self.app, self.state, self.retry_after = app, state, retry_after
        self.sends = StalledSends(state.limits.send_timeout, state.stalled)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNCOUNTED:
            await self.app(scope, receive, send)
            return
        state, sends = self.state, self.sends
        watch = is_watch(scope["path"])
        peer = scope["client"][0] if scope.get("client") else None
        token, body = read_headers(scope)
        if token == state.write_token:
            token = None
        if sends.watcher is None or sends.watcher.done():
            sends.start()
        if why := state.take(peer, token, watch=watch):
            await self._refuse(scope, send, why, watch)
            return
        started = False
        waiting = sends.waiting

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            task = asyncio.current_task()  # a streaming response sends from a task of its own
            waiting[task] = time.monotonic()
            try:
                await send(message)
            except asyncio.CancelledError:
                if sends.gave_up(task):
                    raise SendTimeout from None
                raise
            finally:
                del waiting[task]

        try:
            # A request without a body has nothing to time: its receive is left as it is.
            await self.app(scope, self._receiving(receive) if body else receive, sending)
        except BaseException as exc:  # an ExceptionGroup of a streaming response's tasks, too
            if _holds(exc, SendTimeout):
                log.warning(
                    "%s %s: the client took nothing for %g s; its connection is closed",
                    scope["method"],
                    scope["path"],
                    state.limits.send_timeout,
                )
            elif _holds(exc, BodyTimeout) and not started:
                await send_refusal(
                    send, 408, "request_timeout", str(_find(exc, BodyTimeout)), (b"connection", b"close")
                )
            else:
                raise
        finally:
            state.give_back(peer, token, watch=watch)

    def _receiving(self, receive: Receive) -> Receive:
        """``receive`` with the body's deadlines: no ``receive_timeout`` seconds without a byte,
        and ``min_upload_rate`` bytes a second on average past that grace."""
        limits = self.state.limits
        began, got, done = time.monotonic(), 0, False

        async def receiving() -> Message:
            nonlocal got, done
            if done:  # the body is in: what follows is the disconnect a watch waits for
                return await receive()
            wait = limits.receive_timeout
            if limits.min_upload_rate:
                wait = min(wait, began + limits.receive_timeout + got / limits.min_upload_rate - time.monotonic())
            try:
                async with asyncio.timeout(max(wait, 0)):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout(
                    f"the request body stalled or came slower than {limits.min_upload_rate:,.0f} "
                    f"bytes/s after {got:,} bytes (no byte may wait {limits.receive_timeout:g} s); "
                    "send it again faster"
                ) from None
            got += len(message.get("body", b""))
            done = not message.get("more_body", False)
            return message

        return receiving

    async def _refuse(self, scope: Scope, send: Send, why: str, watch: bool) -> None:
        state, limits = self.state, self.state.limits
        state.refused += 1
        scope["route"] = SHED_ROUTE
        if why == "held" and watch:
            reason = (
                f"this client has {limits.watches_per_client} watches waiting, its share of the server's "
                f"{limits.watches}; try again in {self.retry_after} s"
            )
        elif why == "held":
            reason = (
                f"this client has {limits.per_client} requests in flight, its share of the server's "
                f"{limits.requests}; try again in {self.retry_after} s"
            )
        elif watch:
            reason = (
                f"{state.watches} watches are waiting, the most this server holds; try again in {self.retry_after} s"
            )
        else:
            reason = (
                f"{state.requests} requests are in flight, the most this server takes at once; "
                f"try again in {self.retry_after} s"
            )
        await send_refusal(send, 503, "overloaded", reason, (b"retry-after", str(self.retry_after).encode()))


async def send_refusal(send: Send, status: int, code: str, reason: str, *headers: tuple[bytes, bytes]) -> None:
    """Answer ``status`` with the one error shape."""
    start, body = _refusal(status, code, reason, *headers)
    await send(start)
    await send(body)


def _find(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``exc`` or the first of its kind inside an exception group.

    >>> _find(ExceptionGroup("g", [ValueError("v"), KeyError("k")]), KeyError)
    KeyError('k')
    """
    if isinstance(exc, kind):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        if (found := _find(inner, kind)) is not None:
            return found
    return None


def _holds(exc: BaseException, kind: type[BaseException]) -> bool:
    return _find(exc, kind) is not None
