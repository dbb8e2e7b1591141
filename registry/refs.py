"""How a version is referred to: a number, ``latest`` or an alias (shared by the server, its
API and the client, which must not need the database layer to parse a reference)."""

from __future__ import annotations


# The largest number an SQL BIGINT holds: a larger one names no version (and SQLite would
# raise OverflowError on it).
MAX_VERSION = (1 << 63) - 1


def version_number(ref: int | str) -> int | None:
    """The version number a reference names, or None for ``latest`` or an alias. Only ASCII
    digits count: ``"²".isdigit()`` is True, but no version is called that.

    >>> version_number("12"), version_number(3), version_number("latest"), version_number("²")
    (12, 3, None, None)
    >>> version_number("9" * 5000) > MAX_VERSION
    True
    """
    if isinstance(ref, int):
        return ref
    if not (ref.isascii() and ref.isdigit()):
        return None
    # Past 19 digits no version is meant (and int() refuses a string past 4,300 of them).
    return int(ref) if len(ref) <= 19 else MAX_VERSION + 1
