"""Settings: one pydantic-settings model a command or service, the one place its defaults live.

A model's fields are read from the environment (``TOKMAINT_<SECTION>_<FIELD>``, the section its
``env_prefix``) under what code or a command line's options give; the command line makes one
``--option`` a field (``tokmaint.options.add_settings``). A field declared with :func:`setting`
carries its ``--help`` text and its range, a :class:`Number`: pydantic checks it when the settings
are made, and the command line when it parses the option (the error names the option and the range).

>>> class Steps(Settings):
...     model_config = SettingsConfigDict(env_prefix="TOKMAINT_EXAMPLE_")
...     steps: int = setting(10, whole(1), "optimizer steps")
>>> Steps().steps, Steps(steps=3).replace(steps=4).steps
(10, 4)
>>> Steps(steps=0)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for Steps
steps
  Input should be greater than or equal to 1 ...
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
from dataclasses import dataclass
from typing import Annotated, Any, Self

from annotated_types import Ge, Gt, Le, Lt
from pydantic import AfterValidator, Field, JsonValue
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings
from pydantic_settings import SettingsConfigDict as SettingsConfigDict  # re-exported: settings models import it here

_LINEAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Settings(BaseSettings):
    """Frozen settings (hashable, like the parameters of a run); unknown fields are refused."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid")

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes``, checked as new settings are."""
        return type(self)(**{**self.model_dump(), **changes})


@dataclass(frozen=True)
class Number:
    """A finite int or float in [low, high] (either end open, or absent)."""

    kind: type[int] | type[float] = float
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
        raise ValueError(f"must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit, got {text!r}")
    return text


LineageName = Annotated[str, AfterValidator(lineage_name)]  # a settings field that holds a lineage's name


def setting(default: Any, rule: Number | None, help: str, *, env: str | None = None, option: str | None = None) -> Any:
    """A settings field with its ``--help`` text and its range (a :class:`Number`, or None); ``env``
    names the environment variable that sets it when it is not the section's (one every part
    shares, like ``TOKMAINT_KAFKA``), ``option`` its command-line option when that is not the
    field's name (``--topic`` for ``docs_topic``).

    >>> field = setting(3, whole(1), "steps", option="count")
    >>> field.default, field.metadata, option_name("steps", field)
    (3, [Ge(ge=1)], '--count')
    """
    bounds: dict[str, Any] = {}
    if rule is not None:
        if rule.low is not None:
            bounds["gt" if rule.low_open else "ge"] = rule.low
        if rule.high is not None:
            bounds["lt" if rule.high_open else "le"] = rule.high
        if rule.kind is float:
            bounds["allow_inf_nan"] = False
    extra: dict[str, JsonValue] | None = {"option": option} if option is not None else None
    return Field(default, description=help, validation_alias=env, json_schema_extra=extra, **bounds)


def option_name(name: str, field: FieldInfo) -> str:
    """The command-line option that sets field ``name``: ``--`` and its name, ``_`` as ``-``,
    unless :func:`setting` named another."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return f"--{str(extra.get('option', name)).replace('_', '-')}"


def environment_variable(name: str, field: FieldInfo, prefix: str) -> str:
    """The environment variable that sets field ``name``: the section's prefix and its name, or
    the one :func:`setting` named.

    >>> environment_variable("redis", setting("redis://", None, "where", env="TOKMAINT_REDIS"), "TOKMAINT_PIPELINE_")
    'TOKMAINT_REDIS'
    >>> environment_variable("redis", setting("redis://", None, "where"), "TOKMAINT_PIPELINE_")
    'TOKMAINT_PIPELINE_REDIS'
    """
    return field.validation_alias if isinstance(field.validation_alias, str) else f"{prefix}{name}".upper()


def rule_of(field: FieldInfo) -> Number | None:
    """The range of a number field (None for other fields), as :func:`setting` declared it.

    >>> rule_of(FieldInfo.from_annotated_attribute(int, Field(3, ge=1))).describe()
    'a whole number ≥ 1'
    >>> rule_of(FieldInfo.from_annotated_attribute(float | None, Field(None, gt=0, le=1))).describe()
    'a number in (0, 1]'
    """
    kinds = set(getattr(field.annotation, "__args__", ())) - {type(None)} or {field.annotation}
    if kinds not in ({int}, {float}):
        return None
    limits = {type(m): m for m in field.metadata if isinstance(m, (Ge, Gt, Le, Lt))}
    low, high = limits.get(Gt) or limits.get(Ge), limits.get(Lt) or limits.get(Le)
    return Number(
        kinds.pop(),
        low=None if low is None else getattr(low, "gt", getattr(low, "ge", None)),
        high=None if high is None else getattr(high, "lt", getattr(high, "le", None)),
        low_open=Gt in limits,
        high_open=Lt in limits,
    )
