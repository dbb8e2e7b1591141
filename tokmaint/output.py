"""What commands print: a result as aligned ``key  value`` rows or as JSON, a table, a warning,
and whether progress bars show; and the one file an option names (``--report FILE``) that a
command writes, checked before its work.

>>> print_result({"versions": 3, "bench": {"mb_per_s": 12.5}}, as_json=False)
versions        3
bench.mb_per_s  12.5000
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tokenizer_service.errors import OutputError
from tokenizer_service.output_dir import write_file


def _flatten(data: dict[str, Any] | list[dict[str, Any]], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts, and lists of dicts (numbered from 1), to dotted rows.

    >>> _flatten({"a": {"b": 1}, "runs": [{"c": 2}, {"c": 3}], "names": ["x"]})
    [('a.b', 1), ('runs.1.c', 2), ('runs.2.c', 3), ('names', ['x'])]
    """
    rows = []
    for key, value in data.items() if isinstance(data, dict) else enumerate(data, 1):
        name = f"{prefix}{key}"
        nested = isinstance(value, dict) or (
            isinstance(value, list) and value and all(isinstance(item, dict) for item in value)
        )
        rows.extend(_flatten(value, name + ".") if nested else [(name, value)])
    return rows


def print_result(result: dict[str, Any], *, as_json: bool) -> None:
    """A command's result: indented JSON, or a ``key  value`` row per leaf (floats to 4 places).

    >>> print_result({"ok": True, "ratio": 1.0}, as_json=True)
    {
      "ok": true,
      "ratio": 1.0
    }
    """
    if as_json:
        print(json.dumps(result, indent=2))
        return
    rows = _flatten(result)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        shown = f"{value:.4f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {shown}")


def print_rows(rows: list[dict[str, Any]]) -> None:
    """A table: one line per row, a column per key (floats to 4 places, None as '-').

    >>> print_rows([{"corpus": "git", "ratio": 1.25}, {"corpus": "news", "ratio": None}])
    corpus   ratio
    git     1.2500
    news         -
    """
    cells = [
        [("-" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)) for v in row.values()] for row in rows
    ]
    header = list(rows[0])
    widths = [max(len(h), *(len(c[k]) for c in cells)) for k, h in enumerate(header)]
    for line in [header, *cells]:
        print("  ".join(c.rjust(w) if k else c.ljust(w) for k, (c, w) in enumerate(zip(line, widths))))


def warn(message: str) -> None:
    """A warning on stderr, through the ``tokmaint`` logger (its format: ``TOKMAINT_LOG_FORMAT``)."""
    logging.getLogger("tokmaint").warning(message)


def show_progress(args: argparse.Namespace) -> bool:
    """Progress bars go to an interactive stderr, never under ``--json``.

    >>> show_progress(argparse.Namespace(json=True))
    False
    """
    return not args.json and sys.stderr.isatty()


def claim_file(path: str, *, option: str, force: bool, ours: Callable[[bytes], bool] | None = None) -> Path:
    """Check, before a command's work, that it may write the file ``path`` (its ``option``): a new
    file in a folder that exists, or a file ``ours`` recognises as this command's output; any other
    file only with ``force`` (``tokenizer_service.output_dir``'s rule, for a file). A folder, or a
    place that is no folder, is refused whatever ``force`` says.

    >>> import tempfile
    >>> notes = Path(tempfile.mkdtemp()) / "notes.txt"
    >>> claim_file(str(notes), option="--report", force=False) == notes
    True
    >>> _ = notes.write_text("mine")
    >>> claim_file(str(notes), option="--report", force=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tokenizer_service.errors.OutputError: --report .../notes.txt exists and was not written by this command; \
choose another --report, or pass --force to replace it
    >>> claim_file(str(notes), option="--report", force=False, ours=lambda data: data == b"mine") == notes
    True
    """
    file = Path(path)
    if file.is_dir():
        raise OutputError(f"{option} {path} is a directory, not a file")
    if not file.parent.is_dir():
        raise OutputError(f"cannot write {option} {path}: {file.parent} is not a folder")
    try:  # a folder that takes no new file (read-only, /proc) is found now, not after the work
        with tempfile.TemporaryFile(dir=file.parent):
            pass
    except OSError as exc:
        raise OutputError(
            f"cannot write {option} {path}: {file.parent} takes no new file ({exc.strerror or exc})"
        ) from None
    if file.exists() and not force:
        try:
            recognised = ours is not None and file.is_file() and ours(file.read_bytes())
        except OSError as exc:
            raise OutputError(f"cannot read {option} {path}: {exc.strerror or exc}") from None
        if not recognised:
            raise OutputError(
                f"{option} {path} exists and was not written by this command; choose another {option}, "
                "or pass --force to replace it"
            )
    return file


def replace_file(file: Path, data: bytes) -> None:
    """Write ``file`` whole or not at all: staged beside it, fsynced, then renamed over it."""
    staged = file.with_name(f".{file.name}.tokmaint-staging-{os.getpid()}")
    try:
        write_file(staged, data)
        os.replace(staged, file)
    finally:
        staged.unlink(missing_ok=True)
