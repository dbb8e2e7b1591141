"""How a record's JSON is read and named in errors: the rules every reader of documents shares
(the corpus reader, ``tokenizer_service.corpus``, and the stream's ``schemas.document``).

>>> json_object('{"text": "a", "ts": "2021-05"}')
{'text': 'a', 'ts': '2021-05'}
>>> parse_timestamp("2021-05").isoformat()
'2021-05-01T00:00:00+00:00'
>>> json_kind([1])
'a list'
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timezone
from typing import Any

# ISO-8601 reduced precision (a year, a month), which datetime.fromisoformat does not take.
_YEAR_OR_MONTH = re.compile(r"\d{4}(-\d{2})?")


def json_kind(value: Any) -> str:
    """How a JSON value is named in an error message.

    >>> [json_kind(v) for v in (None, True, 3, 2.5, [1], {"a": 1}, "s")]
    ['null', 'a boolean', 'a number', 'a number', 'a list', 'an object', 'a string']
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    names: dict[type, str] = {list: "a list", str: "a string"}
    return names.get(type(value), type(value).__name__)


def parse_timestamp(value: Any) -> datetime:
    """An ISO-8601 string as an aware UTC datetime (no offset means UTC); ValueError otherwise.

    >>> parse_timestamp("2021-05-04T10:00:00+02:00").isoformat()
    '2021-05-04T08:00:00+00:00'
    >>> parse_timestamp("2021").isoformat(), parse_timestamp("2021-05-04T10:00:00Z").hour
    ('2021-01-01T00:00:00+00:00', 10)
    """
    if not isinstance(value, str):
        raise ValueError(f"'ts' must be an ISO-8601 string, got {json_kind(value)}")
    try:  # the common case in one call (a stream decodes one a record); it refuses "2021" and " "
        ts = datetime.fromisoformat(value)
    except ValueError:
        ts = None
    try:
        if ts is None:
            text = value.strip()
            if _YEAR_OR_MONTH.fullmatch(text):
                text += "-01" * (2 - text.count("-"))
            ts = datetime.fromisoformat(text)
        return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)
    except ValueError:
        raise ValueError(f"'ts' is not an ISO-8601 time: {value[:40]!r}") from None
    except OverflowError:  # in UTC it falls outside years 1-9999
        raise ValueError(f"'ts' is out of range in UTC: {value[:40]!r}") from None


def repeated_keys(pairs: list[tuple[str, Any]]) -> tuple[str, ...]:
    """The keys of a JSON object's pairs that an earlier pair already named (JSON keeps the last).

    >>> repeated_keys([("a", 1), ("b", 2), ("a", 3)])
    ('a',)
    """
    seen: set[str] = set()
    repeated: list[str] = []
    for k, _ in pairs:
        if k in seen:
            repeated.append(k)
        else:
            seen.add(k)
    return tuple(repeated)


class JSONObject(dict[str, Any]):
    """A parsed JSON object that remembers the keys it held more than once, for a reader that
    reports every problem of a file (a tokenizer.json) instead of stopping at the first.

    >>> json.loads('{"a": 1, "a": 2}', object_pairs_hook=JSONObject.from_pairs).duplicates
    ('a',)
    """

    duplicates: tuple[str, ...] = ()

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, Any]]) -> "JSONObject":
        obj = cls(pairs)
        if len(obj) != len(pairs):
            obj.duplicates = repeated_keys(pairs)
        return obj


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when it names a key twice (JSON would silently keep the last).

    >>> json.loads('{"text": "a", "text": "b"}', object_pairs_hook=_unique_keys)
    Traceback (most recent call last):
    ...
    ValueError: key 'text' appears twice
    """
    record = dict(pairs)
    if len(record) != len(pairs):
        raise ValueError(f"key {repeated_keys(pairs)[0]!r} appears twice")
    return record


def refuse_constant(name: str) -> Any:
    """Python's ``json`` reads ``NaN``, ``Infinity`` and ``-Infinity``; JSON has no such literals.

    >>> json.loads('[NaN]', parse_constant=refuse_constant)
    Traceback (most recent call last):
    ...
    ValueError: not JSON (NaN is not a JSON value)
    """
    raise ValueError(f"not JSON ({name} is not a JSON value)")


def parse_whole(text: str) -> int:
    """A JSON integer, or ValueError in plain words past Python's limit on the digits it converts.

    >>> parse_whole("12"), json.loads("[7]", parse_int=parse_whole)
    (12, [7])
    >>> parse_whole("9" * 5001)
    Traceback (most recent call last):
    ...
    ValueError: not JSON tokmaint can read (a number 5,001 digits long; at most 4,300)
    """
    digits = len(text.lstrip("-"))
    if (limit := sys.get_int_max_str_digits()) and digits > limit:  # 0: no limit
        raise ValueError(f"not JSON tokmaint can read (a number {digits:,} digits long; at most {limit:,})")
    return int(text)


# One for all (json.loads builds one a call); JSON's numbers only.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=refuse_constant, parse_int=parse_whole)


def json_object(line: str, *, expected: str = "a JSON object") -> dict[str, Any]:
    """A record's JSON object, which may name no key twice; ValueError with the reason otherwise
    (the corpus reader's rule, and the stream's: ``schemas.document``).

    >>> json_object('{"text": "a"}')
    {'text': 'a'}
    >>> json_object('[1]')
    Traceback (most recent call last):
    ...
    ValueError: expected a JSON object, got a list
    """
    try:
        record = _DECODER.decode(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ValueError("not JSON tokmaint can read (nested too deeply)") from None
    if not isinstance(record, dict):
        raise ValueError(f"expected {expected}, got {json_kind(record)}")
    return record
