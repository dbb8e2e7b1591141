"""Numeric options with their allowed ranges, checked when the command line is parsed.

A :class:`Number` is an argparse ``type`` (the error names the option and the range) and a
checker for settings built in code (:func:`check_settings`); settings dataclasses declare one
per field with :func:`setting`, which also carries the ``--help`` text.

>>> share = Number(float, low=0, high=1, low_open=True)
>>> share("0.5"), share.describe()
(0.5, 'a number in (0, 1]')
>>> share("nan")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: must be a number in (0, 1], got 'nan'
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

_LINEAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Number:
    """A finite int or float in [low, high] (either end open, or absent)."""

    kind: type = float
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def describe(self) -> str:
        """The allowed values in words: ``Number(int, low=1).describe() == 'a whole number ≥ 1'``."""
        noun = "a whole number" if self.kind is int else "a number"
        low, high = (f"{x:,}" if self.kind is int else f"{x:g}" for x in (self.low or 0, self.high or 0))
        if self.low is not None and self.high is not None:
            return f"{noun} in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{noun} {'>' if self.low_open else '≥'} {low}"
        if self.high is not None:
            return f"{noun} {'<' if self.high_open else '≤'} {high}"
        return f"a finite {noun.removeprefix('a ')}" if self.kind is float else noun

    def allows(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind is int and not isinstance(value, int):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high or (self.high_open and value == self.high))

    def __call__(self, text: str) -> int | float:
        """Parse and check one command-line value (argparse ``type``)."""
        try:
            value = self.kind(text)
        except ValueError:
            value = None
        if value is None or not self.allows(value):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}")
        return value


def whole(low: int = 0, high: int | None = None) -> Number:
    """A whole number in [low, high]."""
    return Number(int, low=low, high=high)


def share(*, zero: bool = False, one: bool = True) -> Number:
    """A fraction in (0, 1], with 0 allowed by ``zero`` and 1 excluded by ``one=False``."""
    return Number(float, low=0, high=1, low_open=not zero, high_open=not one)


def lineage_name(text: str) -> str:
    """A lineage name: 1-64 letters, digits, ``.``, ``_`` or ``-``, starting with a letter or digit
    (it names folders and, later, registry URLs).

    >>> lineage_name("git-commits.v2")
    'git-commits.v2'
    """
    if not _LINEAGE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or "
                                         f"digit, got {text!r}")
    return text


def setting(default: Any, parse: Callable[[str], Any] | None, help: str) -> Any:
    """A settings dataclass field with its parser (a :class:`Number` is also its range) and help
    text: the CLI makes one ``--option`` of it, :func:`check_settings` checks it in code."""
    return field(default=default, metadata={"parse": parse, "help": help})


def check_settings(settings: Any) -> None:
    """Raise ValueError naming the first field outside its range (for settings built in code).

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class S:
    ...     steps: int = setting(1, whole(1), "steps")
    ...     def __post_init__(self): check_settings(self)
    >>> S(steps=0)
    Traceback (most recent call last):
    ...
    ValueError: steps must be a whole number ≥ 1, got 0
    """
    for f in fields(settings):
        number = f.metadata.get("parse")
        value = getattr(settings, f.name)
        if value is None and f.default is None:
            continue
        if isinstance(number, Number) and not number.allows(value):
            raise ValueError(f"{f.name} must be {number.describe()}, got {value!r}")
