"""Heap memory around large builds: hand what they freed back to the operating system, and
keep the cyclic garbage collector out of a build whose objects all live on.

Building a ``tokenizers`` model from a large ``tokenizer.json`` allocates several times the
model's own size while it parses (Gemma-3's 515k merges: ~300 MB to build a ~65 MB model). glibc
keeps what is freed in its arenas, so the process stays that large for as long as it lives unless
it is asked to trim; trimming after such a build returns the parse's memory at once.

>>> release_free_memory()  # a no-op where the C library cannot trim (macOS, musl)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache


@cache
def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_free_memory() -> None:
    """Return the heap's free pages to the OS (glibc ``malloc_trim(0)``).

    Cheap (milliseconds) next to what it follows: call it after a large build or parse, not in loops.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run a block without the cyclic garbage collector's passes; it is on again after, as it was.

    For a block that allocates many containers which all live on (a Ted-Tok revision's
    vocabulary, merges and graph: ~200k at 50k tokens): each pass finds nothing to free, yet the
    allocations set off hundreds of them, full ones over the whole heap included (bench
    throughput's revision: 381 young, 34 middle and 2 full passes, 0.25 s of 1.5 s on 2 busy
    cores). Cycles the block leaves are collected by the next pass after it.

    >>> with collector_paused():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:  # a caller that had it off keeps it off
            gc.enable()


def tune_collector_for_parses() -> None:
    """For a long-lived server that parses large JSON (a registry taking publishes): freeze what
    start-up made out of the cyclic collector's sight and make its young generation large. A
    publish parses a tokenizer.json of ~100k lists and strings (50k tokens): Python's default
    thresholds would run a dozen full collections over them per publish (~150 ms).

    >>> before = gc.get_threshold()
    >>> tune_collector_for_parses(); gc.get_threshold()[0]
    100000
    >>> gc.unfreeze(); gc.set_threshold(*before)  # (the doctest's process back as it was)
    """
    gc.freeze()
    gc.set_threshold(100_000, 20, 100)
