"""Load on an HTTP server, for ``bench registry`` and ``bench ingest``.

``load_ramp`` sends requests **open loop**: at a fixed rate whatever the server does (a closed
loop slows down with the server and hides its queue), each one's latency counted from the moment
it was due, so time spent waiting for a connection counts too. It doubles the rate step by step
until the server no longer answers everything within the target (the p99 passes ``limit_ms``, or
more than 1% is refused with 429/503), runs ``past_steps`` doublings past that point to show what
the server does there, and says whether any request went unanswered (``hung``: nothing within
``timeout`` seconds; ``failed``: the connection broke).

    ramp = load_ramp(url, lambda i: LoadRequest("GET", "/healthz"), start_rps=50, max_rps=800, seconds=5)
    ramp.report()["max_good_rps"]

``closed_loop_rps`` is the other kind: ``clients`` connections each sending its next request as
soon as the last is answered, for the most requests a second the server can give.

The client is a minimal HTTP/1.1 one on asyncio streams: a general client (httpx) spends more
CPU per request than the server on two cores, and would measure itself.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from tqdm import tqdm

from tokenizer_service.errors import TokmaintError
from tokenizer_service.settings import Number, Settings, SettingsConfigDict, setting, whole

HUNG, FAILED = -1, 0  # an answer's status when none came in time, or the connection broke
REFUSED = (429, 503)


class LoadRampSettings(Settings):
    """A load ramp's: each step's length, its first and highest rate, and the server's limit of
    requests at once (a benchmark's settings add their own)."""

    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_LOAD_")

    seconds: float = setting(
        5.0, Number(float, low=0, low_open=True), "seconds of each load step (and of each other timed test)"
    )
    start_rps: float = setting(25.0, Number(float, low=0, low_open=True), "the ramp's first rate (requests/s)")
    max_rps: float = setting(3200.0, Number(float, low=0, low_open=True), "the ramp's highest rate")
    max_in_flight: int = setting(64, whole(1), "the server's requests at once (one more is answered 503)")


@dataclass(frozen=True)
class LoadRequest:
    """One request: its method, path (with the query), extra headers and body."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def encoded(self, host: str) -> bytes:
        """The request as HTTP/1.1 bytes.

        >>> LoadRequest("POST", "/x", (("A", "1"),), b"hi").encoded("h:1")
        b'POST /x HTTP/1.1\\r\\nHost: h:1\\r\\nA: 1\\r\\nContent-Length: 2\\r\\n\\r\\nhi'
        """
        lines = [f"{self.method} {self.path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in self.headers)]
        if self.body or self.method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


@dataclass(frozen=True)
class Answer:
    """What request ``index`` got: its status (``HUNG``, ``FAILED``), the milliseconds from when
    it was due to the end of the answer, and the answer's body."""

    index: int
    status: int
    ms: float
    body: bytes = b""


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, *, head: bool = False
) -> tuple[int, bytes, bool]:
    """Send one request on a kept-alive connection; its status, body and whether the server
    keeps the connection open (a body by Content-Length or chunked; none for ``head``, a HEAD
    request, whatever length its headers name)."""
    writer.write(request)
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("the server closed the connection")
    status = int(status_line.split()[1])
    length, chunked, keep = 0, False, True
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = value == b"chunked"
        elif name == b"connection":
            keep = value != b"close"
    if head:
        return status, b"", keep
    if not chunked:
        return status, await reader.readexactly(length), keep
    parts = []
    while size := int((await reader.readline()).split(b";")[0], 16):
        parts.append(await reader.readexactly(size))
        await reader.readline()
    await reader.readline()
    return status, b"".join(parts), keep


async def open_loop(
    url: str,
    make: Callable[[int], LoadRequest],
    *,
    rate: float,
    seconds: float,
    first: int = 0,
    timeout: float = 10.0,
    max_connections: int = 256,
) -> list[Answer]:
    """Requests ``first``, ``first + 1``, … made by ``make``, one due every ``1/rate`` s for
    ``seconds``, on up to ``max_connections`` kept-alive connections; every one's answer."""
    target = httpx.URL(url)
    host = f"{target.host}:{target.port}"
    loop = asyncio.get_running_loop()
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    slots = asyncio.Semaphore(max_connections)

    async def send(index: int) -> tuple[int, bytes]:
        async with slots:
            reader, writer = idle.pop() if idle else await asyncio.open_connection(target.host, target.port)
            try:
                status, body, keep = await exchange(reader, writer, make(index).encoded(host))
            except BaseException:
                writer.close()
                raise
            if keep:
                idle.append((reader, writer))
            else:
                writer.close()
            return status, body

    async def one(index: int, due: float) -> Answer:
        try:
            status, body = await asyncio.wait_for(send(index), timeout=due + timeout - loop.time())
        except (TimeoutError, asyncio.TimeoutError):
            return Answer(index, HUNG, 1000 * (loop.time() - due))
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            return Answer(index, FAILED, 1000 * (loop.time() - due))
        return Answer(index, status, 1000 * (loop.time() - due), body)

    start, tasks = loop.time(), []
    for k in range(max(1, round(rate * seconds))):
        due = start + k / rate
        if (wait := due - loop.time()) > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(one(first + k, due)))
    answers = await asyncio.gather(*tasks)
    for _, writer in idle:
        writer.close()
    return answers


def summary(answers: list[Answer], *, rate: float, seconds: float) -> dict[str, Any]:
    """One step of a ramp: the rate offered and served, the latency of every answer (refusals
    included: a client waits for them too) and of the served ones, and the answers by status.

    >>> s = summary([Answer(0, 200, 10.0), Answer(1, 503, 1.0), Answer(2, HUNG, 10000.0)], rate=3, seconds=1)
    >>> s["served_rps"], s["refused_share"], s["status"], s["hung"]
    (1.0, 0.333, {'200': 1, '503': 1}, 1)
    """
    answered = [a.ms for a in answers if a.status > 0]
    served = [a.ms for a in answers if 200 <= a.status < 400]
    status = Counter(str(a.status) for a in answers if a.status > 0)

    def percentile(values: list[float], q: float) -> float | None:
        return round(float(np.percentile(values, q)), 1) if values else None

    return {
        "offered_rps": rate,
        "served_rps": round(len(served) / seconds, 1),
        "p50_ms": percentile(answered, 50),
        "p99_ms": percentile(answered, 99),
        "served_p99_ms": percentile(served, 99),
        "refused_share": round(sum(status[str(s)] for s in REFUSED) / len(answers), 3),
        "status": dict(sorted(status.items())),
        "hung": sum(a.status == HUNG for a in answers),
        "failed": sum(a.status == FAILED for a in answers),
    }


@dataclass
class Ramp:
    """The steps of a ramp and every answer, in the order the requests were made."""

    limit_ms: float
    steps: list[dict[str, Any]] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)

    def past(self, step: dict[str, Any]) -> bool:
        """Whether the server did not answer everything within the target at this step."""
        return (step["p99_ms"] or 0) > self.limit_ms or step["refused_share"] > 0.01 or step["hung"] > 0

    def report(self) -> dict[str, Any]:
        """``max_good_rps``: the highest rate served whole within the target;
        ``p99_passes_limit_at_rps``: the first rate whose p99 passed it (None: none did, the
        server refused instead); what it answered past that; any request left unanswered."""
        good = [s["offered_rps"] for s in self.steps if not self.past(s)]
        over = [s["offered_rps"] for s in self.steps if (s["p99_ms"] or 0) > self.limit_ms]
        beyond = [s for s in self.steps if self.past(s)]
        return {
            "limit_ms": self.limit_ms,
            "max_good_rps": max(good, default=None),
            "p99_passes_limit_at_rps": min(over, default=None),
            "past_it": {
                "refused": sum(s["status"].get(str(c), 0) for s in beyond for c in REFUSED),
                "served": sum(n for s in beyond for c, n in s["status"].items() if int(c) < 400),
                "server_errors": sum(
                    n for s in beyond for c, n in s["status"].items() if int(c) >= 500 and int(c) not in REFUSED
                ),
            },
            "hung": sum(s["hung"] for s in self.steps),
            "failed": sum(s["failed"] for s in self.steps),
            "steps": self.steps,
        }


def load_ramp(
    url: str,
    make: Callable[[int], LoadRequest],
    *,
    start_rps: float,
    max_rps: float,
    seconds: float,
    limit_ms: float = 500.0,
    past_steps: int = 1,
    timeout: float = 10.0,
    progress: bool = False,
) -> Ramp:
    """Open-loop steps of ``seconds`` from ``start_rps``, doubling, until ``past_steps`` past the
    first step beyond the target (or ``max_rps``). Requests are numbered on across steps."""
    if not 0 < start_rps <= max_rps:
        raise TokmaintError(f"the ramp needs 0 < start_rps ≤ max_rps, got {start_rps:g} and {max_rps:g}")
    ramp, rate, beyond = Ramp(limit_ms), start_rps, 0
    with tqdm(desc="load", unit="step", disable=not progress) as bar:
        while rate <= max_rps and beyond <= past_steps:
            answers = asyncio.run(
                open_loop(url, make, rate=rate, seconds=seconds, first=len(ramp.answers), timeout=timeout)
            )
            step = summary(answers, rate=rate, seconds=seconds)
            ramp.steps.append(step)
            ramp.answers.extend(answers)
            if beyond or ramp.past(step):  # the steps from the first past the target on
                beyond += 1
            bar.set_postfix(rps=rate, p99_ms=step["p99_ms"], refused=step["refused_share"])
            bar.update()
            rate *= 2
            time.sleep(1.0)  # the server's queue drains: each step starts from the same place
    return ramp


async def _closed_loop(
    url: str, clients: int, seconds: float, headers: dict[str, str], expected: int, method: str
) -> float:
    target = httpx.URL(url)
    request = LoadRequest(method, target.raw_path.decode(), tuple(headers.items())).encoded(
        f"{target.host}:{target.port}"
    )
    deadline = time.monotonic() + seconds

    async def client() -> int:
        reader, writer = await asyncio.open_connection(target.host, target.port)
        done = 0
        try:
            while time.monotonic() < deadline:
                status, _, _ = await exchange(reader, writer, request, head=method == "HEAD")
                if status != expected:
                    raise TokmaintError(f"{method} {url} answered {status}, expected {expected}")
                done += 1
        finally:
            writer.close()
        return done

    started = time.monotonic()
    counts = await asyncio.gather(*(client() for _ in range(clients)))
    return sum(counts) / (time.monotonic() - started)


def closed_loop_rps(
    url: str,
    *,
    clients: int,
    seconds: float,
    headers: dict[str, str] | None = None,
    expected: int = 200,
    method: str = "GET",
) -> float:
    """Requests (GET, or HEAD) a second from ``clients`` connections, each sending as soon as it
    is answered."""
    return asyncio.run(_closed_loop(url, clients, seconds, headers or {}, expected, method))
