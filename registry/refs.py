"""How a version is referred to: a number, ``latest`` or an alias (shared by the server, its
API and the client, which must not need the database layer to parse a reference), and which
alias names would be read as something else.

An alias must not be a name the REST API or the Hugging Face Hub protocol reads as another
reference (``api/routes/hub.py``): ``latest``, ``main`` (the Hub's newest version), digits or
``v`` and digits (a version number, served ``immutable``), 40 hex characters (a commit hash).
"""

from __future__ import annotations

import re


# The largest number an SQL BIGINT holds: a larger one names no version (and SQLite would
# raise OverflowError on it).
MAX_VERSION = (1 << 63) - 1
_VERSION_NAME = re.compile(r"[vV]?[0-9]+")
_COMMIT_NAME = re.compile(r"[0-9a-fA-F]{40}")


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


def alias_problem(alias: str) -> str | None:
    """Why ``alias`` cannot name an alias (None: it can): it would shadow a version reference,
    read as another version by the REST API or the Hub, whose clients would cache it as immutable.

    >>> alias_problem("serving") is None, alias_problem("v2-candidate") is None
    (True, True)
    >>> print(alias_problem("main"))
    alias 'main' would shadow a version reference: 'main' names the newest version
    >>> print(alias_problem("v0"))
    alias 'v0' would shadow a version reference: a number, or v and a number, names a version
    >>> print(alias_problem("ab" * 20).split(": ")[1])
    40 hex characters name a commit (the Hub's)
    """
    if alias in ("latest", "main"):
        return f"alias {alias!r} would shadow a version reference: {alias!r} names the newest version"
    if _VERSION_NAME.fullmatch(alias) or alias.isdigit():  # any digits: "²" would confuse a reader too
        return f"alias {alias!r} would shadow a version reference: a number, or v and a number, names a version"
    if _COMMIT_NAME.fullmatch(alias):
        return f"alias {alias!r} would shadow a version reference: 40 hex characters name a commit (the Hub's)"
    return None
