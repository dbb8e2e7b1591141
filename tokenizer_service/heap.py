"""Hand freed heap memory back to the operating system.

Building a ``tokenizers`` model from a large ``tokenizer.json`` allocates several times the
model's own size while it parses (Gemma-3's 515k merges: ~300 MB to build a ~65 MB model). glibc
keeps what is freed in its arenas, so the process stays that large for as long as it lives unless
it is asked to trim; trimming after such a build returns the parse's memory at once.

>>> release_free_memory()  # a no-op where the C library cannot trim (macOS, musl)
"""

from __future__ import annotations

import ctypes
import ctypes.util
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
