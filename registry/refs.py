"""How a version is referred to: a number, ``latest`` or an alias (shared by the server, its
API and the client, which must not need the database layer to parse a reference), and which
alias names would be read as something else.

An alias must not be a name the REST API or the Hugging Face Hub protocol reads as another
reference (``api/routes/hub.py``): ``latest``, ``main`` (the Hub's newest version), digits or
``v`` and digits (a version number, served ``immutable``), 40 hex characters (a commit hash).
Both read such a name so, never as an alias a registry older than the rule stored under it
(``registry migrate`` renames those: migrations 0005 and 0006). Names are case-exact, so ``MAIN``,
``Latest`` and git's ``HEAD`` (in any case) are refused as aliases and read as no version: as
aliases they would name one version while ``main`` names another.
"""

from __future__ import annotations

import re

from tokenizer_service.settings import lineage_name

# The largest number an SQL BIGINT holds: a larger one names no version (and SQLite would
# raise OverflowError on it).
MAX_VERSION = (1 << 63) - 1
_VERSION_NAME = re.compile(r"[vV]?[0-9]+")
_COMMIT_NAME = re.compile(r"[0-9a-fA-F]{40}")


def version_number(ref: int | str) -> int | None:
    """The version number a reference names (digits, or ``v`` and digits, as the Hub reads a
    revision), or None for ``latest`` or an alias. Only ASCII digits count: ``"²".isdigit()`` is
    True, but no version is called that.

    >>> version_number("12"), version_number("v12"), version_number(3), version_number("latest"), version_number("²")
    (12, 12, 3, None, None)
    >>> version_number("9" * 5000) > MAX_VERSION
    True
    """
    if isinstance(ref, int):
        return ref
    digits = ref[1:] if ref[:1] in ("v", "V") else ref
    if not (digits.isascii() and digits.isdigit()):
        return None
    # Past 19 digits no version is meant (and int() refuses a string past 4,300 of them).
    return int(digits) if len(digits) <= 19 else MAX_VERSION + 1


def version_reference(name: str) -> str | None:
    """How ``name`` reads as a version reference rather than an alias (None: it is no such reference).

    >>> version_reference("serving") is None, version_reference("main"), version_reference("v2")
    (True, "'main' names the newest version", 'a number, or v and a number, names a version')
    >>> print(version_reference("MAIN"))
    names are case-exact: 'MAIN' is not 'main', which names the newest version
    >>> print(version_reference("head"))
    'head' is git's name for the newest commit: here 'main' or 'latest' names the newest version
    """
    if name in ("latest", "main"):
        return f"{name!r} names the newest version"
    if name.lower() in ("latest", "main"):
        return f"names are case-exact: {name!r} is not {name.lower()!r}, which names the newest version"
    if name.lower() == "head":
        return f"{name!r} is git's name for the newest commit: here 'main' or 'latest' names the newest version"
    if _VERSION_NAME.fullmatch(name) or name.isdigit():  # any digits: "²" would confuse a reader too
        return "a number, or v and a number, names a version"
    if _COMMIT_NAME.fullmatch(name):
        return "40 hex characters name a commit (the Hub's)"
    return None


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
    >>> print(alias_problem("../x"))  # doctest: +NORMALIZE_WHITESPACE
    alias name must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit, got '../x'
    """
    reading = version_reference(alias)
    if reading is not None:
        return f"alias {alias!r} would shadow a version reference: {reading}"
    try:
        lineage_name(alias)  # an alias is part of URLs as a lineage's name is: the same characters
    except ValueError as exc:
        return f"alias name {exc}"
    return None
