"""Corpora: the one reader every command and service uses.

A corpus is a file of documents, plain or gzip-compressed (detected from its first bytes):

* JSONL (any name but ``.txt``): one JSON object a line with a string ``text`` and, on every
  line or on none, an ISO-8601 ``ts`` (``2021-05-04``, ``2021-05-04T10:00:00+02:00``, ``...Z``;
  a time without offset is UTC). Documents are ordered by ``ts`` in UTC, stable for equal times;
  without ``ts``, file order is time order. Other fields are ignored.
* ``.txt`` / ``.txt.gz``: one document a line (``\n``, ``\r\n`` or ``\r``), in file order;
  blank lines are skipped.

Anything else is a :class:`CorpusError` naming the file, the line and the reason; with
``skip_bad=True`` bad records are skipped instead and kept, with their bytes, in
``Corpus.rejected`` (so an ingest can dead-letter them).

>>> import gzip, json, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "c.jsonl.gz")
>>> with gzip.open(path, "wt") as f:
...     _ = f.write(json.dumps({"ts": "2021-01-01T23:30:00Z", "text": "second"}) + "\\n"
...                 + json.dumps({"ts": "2021-01-02T01:00:00+02:00", "text": "first"}) + "\\n")
>>> [(d.text, d.ts.isoformat()) for d in read_corpus(path)]
[('first', '2021-01-01T23:00:00+00:00'), ('second', '2021-01-01T23:30:00+00:00')]
>>> with open(path, "w") as f:
...     _ = f.write('{"ts": "2021-01-01", "text": null}\\n')
>>> read_corpus(path)
Traceback (most recent call last):
...
tokenizer_service.errors.CorpusError: ...c.jsonl.gz:1: 'text' must be a string, got null
"""

from __future__ import annotations

import gzip
import hashlib
import io
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import overload

from tqdm import tqdm

from schemas.json_values import json_kind, json_object, parse_timestamp
from tokenizer_service.errors import CorpusError

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Document:
    """One document; ``ts`` is an aware UTC datetime, or None in a corpus without times."""

    ts: datetime | None
    text: str


@dataclass(frozen=True)
class Rejected:
    """A record skipped as bad: its line, its bytes as read (decompressed) and the reason."""

    line: int
    data: bytes
    reason: str


@dataclass(frozen=True)
class Corpus(Sequence[Document]):
    """The documents of one file in time order, with what was skipped and a content hash."""

    path: Path
    documents: list[Document]
    rejected: list[Rejected] = field(default_factory=list)
    sha256: str = ""

    @property
    def skipped(self) -> list[str]:
        """The rejected records as ``"line N: reason"``."""
        return [f"line {r.line}: {r.reason}" for r in self.rejected]

    @overload
    def __getitem__(self, index: int) -> Document: ...
    @overload
    def __getitem__(self, index: slice) -> list[Document]: ...
    def __getitem__(self, index: int | slice) -> Document | list[Document]:
        return self.documents[index]

    def __len__(self) -> int:
        return len(self.documents)

    def __iter__(self) -> Iterator[Document]:
        return iter(self.documents)

    @property
    def texts(self) -> list[str]:
        return [d.text for d in self.documents]


def oldest(documents: Iterable[Document], megabytes: float) -> list[Document]:
    """The oldest documents up to ``megabytes`` of UTF-8 text (the one that crosses it included):
    what the benchmarks read of a corpus.

    >>> [d.text for d in oldest([Document(None, "ab"), Document(None, "cd"), Document(None, "e")], 3e-6)]
    ['ab', 'cd']
    """
    out, size = [], 0
    for doc in documents:
        out.append(doc)
        size += len(doc.text.encode("utf-8"))
        if size >= megabytes * 1e6:
            break
    return out


def _record(line: str, *, timed: bool | None) -> Document:
    """One JSONL line as a Document; ValueError with the reason when it is not one."""
    record = json_object(line, expected="a JSON object with 'text'")
    if "text" not in record:
        raise ValueError("no 'text' field")
    text = record["text"]
    if not isinstance(text, str):
        raise ValueError(f"'text' must be a string, got {json_kind(text)}")
    if timed is not None and ("ts" in record) != timed:
        raise ValueError(
            "no 'ts' field, but earlier records have one"
            if timed
            else "has a 'ts' field, but earlier records have none (give every record a 'ts' or none)"
        )
    return Document(ts=parse_timestamp(record["ts"]) if "ts" in record else None, text=text)


def _open_binary(path: Path) -> tuple[io.BufferedReader, io.BufferedIOBase]:
    """(raw file, decompressed stream): gzip is recognised by its magic bytes, not its name."""
    raw = open(path, "rb")
    if raw.read(2) == GZIP_MAGIC:
        raw.seek(0)
        return raw, gzip.GzipFile(fileobj=raw, mode="rb")
    raw.seek(0)
    return raw, raw


def _time(document: Document) -> datetime:
    """A document's time, the sort key of a timed corpus (``_record`` refuses a record without
    'ts' once one had it, and one with 'ts' once one had none)."""
    assert document.ts is not None  # every record of a timed corpus has a 'ts'
    return document.ts


def read_corpus(path: str | Path, *, skip_bad: bool = False, progress: bool = False) -> Corpus:
    """Read a corpus (see the module docstring); refuse an empty one.

    ``skip_bad``: skip records that are not valid documents instead of stopping at the first,
    and keep them in ``Corpus.rejected`` (``Corpus.skipped`` names them). Files that cannot be read at all
    (missing, a directory, corrupt or truncated gzip) are an error either way.
    """
    path = Path(path)
    if not path.exists():
        raise CorpusError(path, "corpus not found")
    if path.is_dir():
        raise CorpusError(path, "is a directory; a corpus is a JSONL(.gz) or .txt(.gz) file")
    plain_text = path.name.endswith((".txt", ".txt.gz"))
    docs: list[Document] = []
    rejected: list[Rejected] = []
    digest = hashlib.sha256()
    timed: bool | None = None
    number = 0
    try:
        size = path.stat().st_size  # the progress bar's total, read first: if it fails, nothing is open yet
        raw, stream = _open_binary(path)
        with (
            raw,
            stream,
            tqdm(total=size, desc=f"read {path.name}", unit="B", unit_scale=True, disable=not progress) as bar,
        ):
            for number, data in enumerate(stream, 1):
                digest.update(data)
                if number % 4096 == 0:
                    bar.update(raw.tell() - bar.n)
                try:
                    line = data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    reason = f"not UTF-8 (byte 0x{data[exc.start]:02x} at byte {exc.start + 1} of the line)"
                    if not skip_bad:
                        raise CorpusError(path, reason, line=number) from None
                    rejected.append(Rejected(number, data, reason))
                    continue
                if number == 1:
                    line = line.removeprefix("\ufeff")
                if not line.strip():
                    continue
                if plain_text:
                    # \r alone ends a line too (old Mac files); "\r\n" leaves an empty piece.
                    docs.extend(
                        Document(ts=None, text=piece) for piece in line.removesuffix("\n").split("\r") if piece.strip()
                    )
                    continue
                try:
                    doc = _record(line, timed=timed)
                except ValueError as exc:
                    if not skip_bad:
                        raise CorpusError(path, str(exc), line=number) from None
                    rejected.append(Rejected(number, data, str(exc)))
                    continue
                timed = doc.ts is not None
                docs.append(doc)
            bar.update(size - bar.n)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise CorpusError(path, f"corrupt or truncated gzip after line {number} ({exc})") from None
    except OSError as exc:
        raise CorpusError(path, exc.strerror or str(exc)) from None
    if not docs:
        detail = (
            f" ({len(rejected)} bad records skipped, the first: line {rejected[0].line}: {rejected[0].reason})"
            if rejected
            else ""
        )
        raise CorpusError(path, f"no documents{detail}")
    if timed:
        docs.sort(key=_time)
    return Corpus(path=path, documents=docs, rejected=rejected, sha256=digest.hexdigest())


def batches(docs: Sequence[Document], size: int) -> Iterator[list[str]]:
    """Consecutive time steps of ``size`` documents (the last may be shorter).

    >>> [len(b) for b in batches([Document(None, "x")] * 5, 2)]
    [2, 2, 1]
    """
    if size < 1:
        raise ValueError(f"a time step needs at least one document, got {size}")
    for start in range(0, len(docs), size):
        yield [d.text for d in docs[start : start + size]]
