"""``tokmaint``: the one command line. Each package contributes its own subcommands
(``add_commands`` in ``tokenizer_service.cli`` and ``registry.cli``), imported when the parser
is built, so the algorithms never import SQL, HTTP, Kafka or Beam.

Errors a user can fix (a bad corpus, tokenizer, option, output directory or registry answer)
are one line on stderr and exit code 2 (``tokmaint --debug ...`` adds the traceback). Ctrl-C
stops cleanly with exit code 130 (SIGTERM: 143); what was written before stays complete.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import json
import signal
import sys
import traceback
from dataclasses import fields, replace
from typing import Any, NoReturn

from tokenizer_service.errors import TokmaintError
from tokenizer_service.options import Number
from tokmaint.logs import configure

# Modules with an ``add_commands(subparsers)``: the packages this command line fronts.
COMMANDS = ("tokenizer_service.cli", "registry.cli", "pipeline.cli", "trainer.cli", "demo.cli")
EXIT_USAGE = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM, raised where the program is, so ``finally`` blocks run as for Ctrl-C."""


def _flatten(data: dict[str, Any] | list[dict[str, Any]], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts, and lists of dicts (numbered from 1), to dotted rows.

    >>> _flatten({"a": {"b": 1}, "runs": [{"c": 2}, {"c": 3}], "names": ["x"]})
    [('a.b', 1), ('runs.1.c', 2), ('runs.2.c', 3), ('names', ['x'])]
    """
    rows = []
    for key, value in data.items() if isinstance(data, dict) else enumerate(data, 1):
        name = f"{prefix}{key}"
        nested = isinstance(value, dict) or (isinstance(value, list) and value
                                             and all(isinstance(item, dict) for item in value))
        rows.extend(_flatten(value, name + ".") if nested else [(name, value)])
    return rows


def print_result(result: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
        return
    rows = _flatten(result)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        shown = f"{value:.4f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {shown}")


def warn(message: str) -> None:
    logging.getLogger("tokmaint").warning(message)


def show_progress(args: argparse.Namespace) -> bool:
    """Progress bars go to an interactive stderr, never under ``--json``."""
    return not args.json and sys.stderr.isatty()


class Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line (the option, what it must be, and where help is)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def print_rows(rows: list[dict[str, Any]]) -> None:
    """A table: one line per row, a column per key (floats to 4 places, None as '-')."""
    cells = [[("-" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)) for v in row.values()]
             for row in rows]
    header = list(rows[0])
    widths = [max(len(h), *(len(c[k]) for c in cells)) for k, h in enumerate(header)]
    for line in [header, *cells]:
        print("  ".join(c.rjust(w) if k else c.ljust(w) for k, (c, w) in enumerate(zip(line, widths))))



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


def subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """A command's group of subcommands, for a package adding one to another's (``bench registry``)."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def build_parser() -> Parser:
    parser = Parser(prog="tokmaint", description="Lifelong BPE tokenizer maintenance.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS:
        importlib.import_module(module).add_commands(sub)
    return parser


def _terminate(signum: int, frame: Any) -> NoReturn:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    previous = signal.signal(signal.SIGTERM, _terminate)
    debug = False
    log = logging.getLogger("tokmaint")
    try:
        configure()
    except ValueError as exc:  # a bad TOKMAINT_LOG_FORMAT: say so, in the plain format
        configure("plain")
        log.warning("%s", exc)
    try:
        # Parsing imports the command modules (numpy, tokenizers): Ctrl-C there stops cleanly too.
        args = build_parser().parse_args(argv)
        debug = args.debug
        return args.func(args)
    except (TokmaintError, OSError) as exc:
        if debug:
            traceback.print_exc()
        log.error("%s", exc)
        return EXIT_USAGE
    except KeyboardInterrupt:
        log.info("interrupted; everything written so far is complete")
        return EXIT_INTERRUPTED
    except Terminated:
        log.info("terminated; everything written so far is complete")
        return EXIT_TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
