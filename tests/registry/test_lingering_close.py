"""A server that answers and closes while its client is still sending: with a plain close the
kernel resets the connection and the answer is lost; with ``LingeringTransport`` it arrives."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from registry.api.lingering_close import LingeringTransport

ANSWER = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class _AnswersUnread(asyncio.Protocol):
    """Reads nothing, answers after 0.2 s and closes: whatever the client sent is still unread."""

    def __init__(self, lingering: bool) -> None:
        self.lingering = lingering

    def connection_made(self, transport: asyncio.Transport) -> None:
        transport.pause_reading()
        self.transport = LingeringTransport(transport, self, seconds=2) if self.lingering else transport
        asyncio.get_running_loop().call_later(0.2, self._answer)

    def _answer(self) -> None:
        self.transport.write(ANSWER)
        self.transport.close()


@contextmanager
def _serving(protocol: Callable[[], asyncio.Protocol]) -> Iterator[int]:
    """A loopback server of ``protocol`` on an event loop of its own thread; its port."""
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(protocol, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        server.close()
        loop.close()


def _exchange(lingering: bool) -> bytes:
    """What a client that sent part of a body reads until the server closes."""
    with (
        _serving(lambda: _AnswersUnread(lingering)) as port,
        socket.create_connection(("127.0.0.1", port), timeout=10) as client,
    ):
        client.sendall(b"POST / HTTP/1.1\r\ncontent-length: 1000\r\n\r\n" + b" " * 100)
        time.sleep(0.5)  # the answer and the close are in before the client reads
        return b"".join(iter(lambda: client.recv(65536), b""))


def test_a_plain_close_with_unread_bytes_loses_the_answer():
    with pytest.raises(ConnectionResetError):
        _exchange(lingering=False)


def test_a_lingering_close_delivers_the_answer_and_then_the_end():
    assert _exchange(lingering=True) == ANSWER


def test_a_lingering_close_tells_the_protocol_once_the_client_is_gone():
    """The serving protocol's ``connection_lost`` runs when the drained connection finally closes
    (uvicorn counts its open connections there)."""
    lost = threading.Event()

    class Recording(_AnswersUnread):
        def connection_lost(self, exc: Exception | None) -> None:
            lost.set()

    with _serving(lambda: Recording(True)) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(b"x" * 100)
            assert client.recv(65536) == ANSWER
            assert not lost.wait(0.3)  # half-closed: still draining while the client is connected
        assert lost.wait(5)  # the client's close ends the drain
