"""What wakes the watches of one server process: one poller reads every lineage's latest number
(one query) every ``every`` seconds while anyone watches, and wakes the watchers of a lineage
whose number moved. N idle watches cost the database one read per period, not N; a version
published through another replica or process is seen as soon as through this one.

    numbers = LatestNumbers(registry.lineages, every=0.2)
    if await numbers.wait_newer("git", after=12, seconds=30): ...   # True: version 13 or later is out
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable

from fastapi.concurrency import run_in_threadpool

log = logging.getLogger("tokmaint.watches")


async def disconnected(receive: Callable[[], Awaitable[dict]]) -> None:
    """Returns once the client has gone (what a request's ``receive`` says after its body)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class LatestNumbers:
    """The latest version number of every lineage, kept fresh by one poller while any watch waits.

    >>> async def demo():
    ...     out = [("git", 1)]
    ...     numbers = LatestNumbers(lambda: out, every=0.01)
    ...     waiting = asyncio.ensure_future(numbers.wait_newer("git", after=1, seconds=5))
    ...     await asyncio.sleep(0.05)
    ...     out[:] = [("git", 2)]
    ...     return await waiting, numbers.numbers
    >>> asyncio.run(demo())
    (True, {'git': 2})
    """

    def __init__(self, read: Callable[[], Iterable[tuple[str, int]]], *, every: float = 0.2) -> None:
        self.read, self.every = read, every
        self.numbers: dict[str, int] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._watchers: Counter[str] = Counter()
        self._poller: asyncio.Task | None = None

    async def wait_newer(self, name: str, *, after: int, seconds: float, gone: Awaitable[object] | None = None) -> bool:
        """Whether lineage ``name`` has a version newer than ``after`` within ``seconds``
        (False at the deadline, or once ``gone`` — the client's disconnect — completes)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        self._watchers[name] += 1
        if self._poller is None:
            self._poller = asyncio.ensure_future(self._poll())
        gone_task = asyncio.ensure_future(gone) if gone is not None else None
        try:
            while self.numbers.get(name, 0) <= after:
                left = deadline - loop.time()
                if left <= 0 or (gone_task is not None and gone_task.done()):
                    return False
                changed = asyncio.ensure_future(self._changed.setdefault(name, asyncio.Event()).wait())
                await asyncio.wait(
                    [changed] + ([gone_task] if gone_task else []), timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                changed.cancel()
            return True
        finally:
            if gone_task is not None:
                gone_task.cancel()
            self._watchers[name] -= 1
            if self._watchers[name] <= 0:
                del self._watchers[name]

    async def _poll(self) -> None:
        """Read every lineage's latest number while anyone watches; wake the watchers of those that moved."""
        try:
            while self._watchers:
                try:
                    numbers = dict(await run_in_threadpool(self.read))
                except Exception as exc:  # the database away a moment: the watches wait on, or time out
                    log.warning("reading the lineages' latest versions failed: %s", exc)
                    numbers = self.numbers
                for name, number in numbers.items():
                    if self.numbers.get(name) != number:
                        self.numbers[name] = number
                        if (event := self._changed.pop(name, None)) is not None:
                            event.set()
                await asyncio.sleep(self.every)
        finally:
            self._poller = None
