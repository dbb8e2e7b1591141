"""Command-line options made from a settings dataclass's fields (:func:`tokenizer_service.options.setting`):
one ``--option`` a field, with its range, help and default, and the settings the options chose.

>>> from dataclasses import dataclass
>>> from tokenizer_service.options import setting, whole
>>> @dataclass(frozen=True)
... class Steps:
...     steps: int = setting(10, whole(1), "optimizer steps")
>>> parser = argparse.ArgumentParser()
>>> add_settings(parser, Steps)
>>> chosen_settings(parser, parser.parse_args(["--steps", "3"]), Steps)
Steps(steps=3)
"""

from __future__ import annotations

import argparse
from dataclasses import fields, replace

from tokenizer_service.options import Number


def add_settings(parser: argparse.ArgumentParser, settings_type: type, *, skip: tuple[str, ...] = ()) -> None:
    """One ``--option`` per field of a settings dataclass (but those in ``skip``: a command that
    has no use for them), with its range, help and default."""
    for f in fields(settings_type):
        if f.name in skip:
            continue
        option = f"--{f.name.replace('_', '-')}"
        help_text = f.metadata.get("help", "")
        if isinstance(f.default, bool):
            parser.add_argument(option, action="store_true", default=None, help=help_text)
            continue
        parse = f.metadata.get("parse") or type(f.default)
        if isinstance(parse, Number):
            help_text += f"; {parse.describe()}"
        parser.add_argument(option, type=parse, default=None, metavar=f.name.upper(),
                            help=f"{help_text} (default: {f.default:g})" if isinstance(f.default, float)
                            else f"{help_text} (default: {f.default})")


def chosen_settings(parser: argparse.ArgumentParser, args: argparse.Namespace, settings_type: type):
    """The settings the options chose; a rule between options fails here, as a usage error."""
    chosen = {f.name: getattr(args, f.name) for f in fields(settings_type) if getattr(args, f.name, None) is not None}
    try:
        return replace(settings_type(), **chosen)
    except ValueError as exc:
        parser.error(str(exc).replace("_", "-"))
