"""Close a connection the way nginx's ``lingering_close`` does, so a client still sending gets
the answer that ends its request.

A server that answers before it has read the whole body (a 408 for an upload under the rate
floor, a 413) and then closes its socket with bytes unread makes the kernel send a reset, and a
reset discards what the client has not read yet: the answer is lost and the client sees
``ConnectionResetError``. Here a close first sends the answer and a FIN (``write_eof``), then reads
and drops what still comes for at most ``LINGER_SECONDS`` (or until the client closes too), and
only then closes.

    serve(app, host="127.0.0.1", port=8000, log_level="info")
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

LINGER_SECONDS = 2.0  # the longest a closed connection keeps reading what its client still sends
HEAD_SECONDS = 15.0  # the longest a request's line and headers may take to arrive (then 408)


class LingeringTransport:
    """A transport whose ``close`` lingers; everything else is the wrapped transport's. A
    protocol wraps the transport it is given and calls ``close`` as before:

        def connection_made(self, transport):
            self.transport = LingeringTransport(transport, self)
    """

    def __init__(
        self, transport: asyncio.Transport, protocol: asyncio.Protocol, *, seconds: float = LINGER_SECONDS
    ) -> None:
        self._transport, self._protocol, self._seconds = transport, protocol, seconds
        self._closing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        transport = self._transport
        if transport.is_closing() or not transport.can_write_eof():  # TLS cannot half-close
            transport.close()
            return
        transport.write_eof()  # the answer, then a FIN once the write buffer has drained
        transport.set_protocol(_Draining(transport, self._protocol, self._seconds))
        transport.resume_reading()


class _Draining(asyncio.Protocol):
    """Drops what a half-closed connection still receives; closes at the client's FIN or after
    ``seconds``, and tells the protocol that served the connection when it is gone."""

    def __init__(self, transport: asyncio.Transport, served: asyncio.Protocol, seconds: float) -> None:
        self.served = served
        self.deadline = asyncio.get_running_loop().call_later(seconds, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.deadline.cancel()
        self.served.connection_lost(exc)


class LingeringHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a ``LingeringTransport``, with a deadline on each request's
    line and headers: uvicorn has none (its keep-alive timeout ends at a request's first byte), so
    headers trickled a byte a second held a connection as long as the client liked."""

    head_seconds = HEAD_SECONDS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(LingeringTransport(transport, self))  # type: ignore[arg-type]
        self._head_deadline: asyncio.TimerHandle | None = None
        self._await_head()

    def _await_head(self) -> None:
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.head_seconds, self._head_too_slow)

    def _head_arrived(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._await_head()  # a kept-alive connection's next request

    def on_headers_complete(self) -> None:
        self._head_arrived()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_arrived()
        super().connection_lost(exc)

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if not self.transport.is_closing():
            body = f"the request's line and headers took more than {self.head_seconds:g} s".encode()
            head = b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
            self.transport.write(head + b"content-length: %d\r\n\r\n" % len(body) + body)
            self.transport.close()


def serve(app: Any, *, host: str, port: int, log_level: str = "info", head_seconds: float = HEAD_SECONDS) -> None:
    """Run ``app`` under uvicorn with lingering closes, until interrupted; a request's line and
    headers that take more than ``head_seconds`` are answered 408."""
    protocol = type("LingeringHttpToolsProtocol", (LingeringHttpToolsProtocol,), {"head_seconds": head_seconds})
    uvicorn.run(app, host=host, port=port, log_level=log_level, http=protocol)
