"""Command-line options made from a settings model (``tokenizer_service.settings``): one
``--option`` a field, with its help, range and default, and the settings the options chose over
the environment's.

>>> from tokenizer_service.settings import Settings, SettingsConfigDict, setting, whole
>>> class Steps(Settings):
...     model_config = SettingsConfigDict(env_prefix="TOKMAINT_EXAMPLE_")
...     steps: int = setting(10, whole(1), "optimizer steps")
>>> parser = argparse.ArgumentParser()
>>> add_settings(parser, Steps)
>>> chosen_settings(parser, parser.parse_args(["--steps", "3"]), Steps)
Steps(steps=3)
"""

from __future__ import annotations

import argparse
import os
import typing
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import ValidationError

from tokenizer_service.settings import Settings, environment_variable, lineage_name, option_name, rule_of, whole


def free_text(value: str) -> str:
    r"""A text option's value (argparse ``type``): UTF-8, as every command reads text. The shell
    hands Python bytes that are not UTF-8 as lone surrogates, which no tokenizer can encode; they are
    refused here, with where they are, rather than deep in a command.

    >>> free_text("héllo")
    'héllo'
    >>> free_text(os.fsdecode(b"ab\xff"))
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be UTF-8 text, got the byte 0xff at byte 2
    """
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:
        os.fsencode(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"must be UTF-8 text, got the byte 0x{exc.object[exc.start]:02x} at byte {exc.start}"
        ) from None
    except UnicodeEncodeError:  # a surrogate that stands for no byte the shell gave
        pass
    raise argparse.ArgumentTypeError("must be UTF-8 text")


def lineage(value: str) -> str:
    """A ``--lineage`` option's value (argparse ``type``): ``tokenizer_service.settings.lineage_name``'s
    rule, in argparse's words (a name that is not UTF-8 from the shell is refused so too).

    >>> lineage("git-commits")
    'git-commits'
    >>> lineage("../x")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit,
    got '../x'
    """
    try:
        return lineage_name(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def port(value: str) -> int:
    """A ``--port`` option's value (argparse ``type``): a TCP port, 1 to 65,535. Outside them a
    server would not listen where it was asked: 70000 binds 70000 mod 65,536, and 0 any free port.

    >>> port("8000")
    8000
    >>> port("70000")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a whole number in [1, 65,535], got '70000'
    """
    return int(whole(1, 65_535)(value))


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def add_settings(
    parser: argparse.ArgumentParser,
    settings_type: type[Settings],
    *,
    skip: tuple[str, ...] = (),
    only: tuple[str, ...] | None = None,
) -> None:
    """One ``--option`` per field of ``settings_type`` (but those in ``skip``, or those not in
    ``only``: a command that has no use for them), with its help, range (checked as the option is
    parsed), choices and default; the help names the environment variable that sets it too."""
    prefix = settings_type.model_config.get("env_prefix", "")
    for name, field in settings_type.model_fields.items():
        if name in skip or (only is not None and name not in only):
            continue
        option, help_text = option_name(name, field), (field.description or "").replace("%", "%%")
        variable = environment_variable(name, field, prefix)
        if field.annotation is bool:
            # --NAME and --no-NAME: a setting that is on by default can be turned off.
            parser.add_argument(
                option,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{help_text} (default: {str(field.default).lower()}; {variable})",
            )
            continue
        rule = rule_of(field)
        choices = typing.get_args(field.annotation) if typing.get_origin(field.annotation) is typing.Literal else None
        if rule is not None:
            help_text += f"; {rule.describe()}"
        default = "" if field.default is None else f"default: {_shown(field.default)}; "
        kind = type(choices[0]) if choices else str  # a Literal of numbers takes numbers
        parser.add_argument(
            option,
            dest=name,
            type=rule or kind,
            choices=choices,
            default=None,
            metavar=None if choices else option.removeprefix("--").replace("-", "_").upper(),
            help=f"{help_text} ({default}{variable})",
        )


def finish_command(
    parser: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int], *, json_help: str = "print JSON"
) -> None:
    """A command's last option, ``--json`` (its result as JSON rather than a table), and ``func``, which
    runs the command (given the parser as ``args.parser``, for its usage errors).

    >>> parser = argparse.ArgumentParser()
    >>> finish_command(parser, lambda args: 0)
    >>> args = parser.parse_args(["--json"])
    >>> args.json, args.parser is parser, args.func(args)
    (True, True, 0)
    """
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.set_defaults(func=func, parser=parser)


def add_bench_options(
    parser: argparse.ArgumentParser,
    settings_type: type[Settings],
    func: Callable[[argparse.Namespace], int],
    *,
    corpus: str | None = None,
) -> None:
    """A benchmark's options: ``--corpus`` (with this help, for one that reads a corpus), one a
    setting, ``--json``; ``func`` runs it."""
    if corpus is not None:
        parser.add_argument("--corpus", required=True, help=corpus)
    add_settings(parser, settings_type)
    finish_command(parser, func)


def chosen_settings(parser: argparse.ArgumentParser, args: argparse.Namespace, settings_type: type[Settings]):
    """The settings the options chose, over the environment's; a bad value (from either) or a rule
    between settings fails here, as a usage error."""
    chosen = {name: getattr(args, name) for name in settings_type.model_fields if getattr(args, name, None) is not None}
    try:
        return settings_type(**chosen)
    except ValidationError as exc:
        parser.error(settings_errors(exc, settings_type, chosen))


def settings_errors(exc: ValidationError, settings_type: type[Settings], chosen: Iterable[str] = ()) -> str:
    """A ValidationError of ``settings_type`` in the command line's words, one line: for each
    error the option (a field in ``chosen``) or the environment variable that gave the value, or
    the rule between settings, and what is wrong."""
    fields, reasons = settings_type.model_fields, []
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        if not error["loc"]:  # a rule between settings: its message names them, as options
            reasons.append(" ".join(w.replace("_", "-") if w in fields else w for w in message.split(" ")))
        elif (name := str(error["loc"][0])) in chosen:
            reasons.append(f"argument {option_name(name, fields[name])}: {message}")
        elif name in fields:
            prefix = settings_type.model_config.get("env_prefix", "")
            reasons.append(f"{environment_variable(name, fields[name], prefix)}: {message}")
        else:  # a value of a field's own variable (TOKMAINT_KAFKA): pydantic names the variable
            reasons.append(f"{name}: {message}")
    return "; ".join(reasons)
