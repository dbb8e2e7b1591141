"""Waiting in a test for what a server does in a process of its own: a check polled until it holds."""

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(check: Callable[[], T], what: str, seconds: float = 30) -> T:
    """``check()`` every 50 ms until it answers something true, which it returns; past ``seconds``
    the test fails with the message ``what``.

    >>> answers = iter([0, [], "ready"])
    >>> until(lambda: next(answers), "the answer never came")
    'ready'
    """
    deadline = time.monotonic() + seconds
    while not (result := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return result
