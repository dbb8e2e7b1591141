"""Timestamped corpora: one JSON object a line with at least ``ts`` and ``text``.

>>> import gzip, json, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "c.jsonl.gz")
>>> with gzip.open(path, "wt") as f:
...     _ = f.write(json.dumps({"ts": "2021-01-02", "text": "b"}) + "\\n" + json.dumps({"ts": "2020", "text": "a"}) + "\\n")
>>> [d.text for d in read_corpus(path)]
['a', 'b']
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Document:
    ts: str
    text: str


def _lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        yield from f


def read_corpus(path: str | Path) -> list[Document]:
    """Read a ``.jsonl``/``.jsonl.gz`` corpus (or ``.txt``: one document a line, no times),
    ordered by ``ts`` (stable, so equal times keep file order)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"corpus not found: {path}")
    if path.name.endswith((".txt", ".txt.gz")):
        return [Document(ts="", text=line.rstrip("\n")) for line in _lines(path) if line.strip()]
    docs = []
    for number, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            docs.append(Document(ts=str(record["ts"]), text=str(record["text"])))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: expected a JSON object with 'ts' and 'text' ({exc})") from None
    return sorted(docs, key=lambda d: d.ts)


def batches(docs: Sequence[Document], size: int) -> Iterator[list[str]]:
    """Consecutive time steps of ``size`` documents (the last may be shorter)."""
    for start in range(0, len(docs), size):
        yield [d.text for d in docs[start : start + size]]
