"""Build ``glibc-changelog.jsonl.gz``: the GNU C Library's ChangeLogs as a drifting stream.

Reads the ``ChangeLog.old/ChangeLog.*`` files of a glibc source tree (1991-2021: the project kept
GNU-style ChangeLogs until it moved to commit messages) and writes one document per entry, as
``{"id", "ts", "text"}`` JSON lines in time order (entries of one day in file order). Entry
headers (date, author's name and e-mail address) are dropped, as are e-mail addresses and lines
naming people (``Reported by``, ``Patch by``, ``Contributed by``, ``Suggested by``, ``Thanks to``)
and Emacs' ``Local Variables`` footers.

Get the tree from Debian's ``glibc-source`` package (no install needed) and run::

    apt-get download glibc-source && dpkg-deb -x glibc-source_*.deb pkg
    mkdir tree && tar -C tree -xf pkg/usr/src/glibc/glibc-*.tar.xz
    python3 data/build_glibc_changelog.py tree/glibc-*/ChangeLog.old data/glibc-changelog.jsonl.gz
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

# "2000-02-28  Name  <mail>" and "Mon Jul 22 17:06:24 1991  Name  (mail)" (optionally a zone).
ISO_HEADER = re.compile(r"^(\d{4}-\d{2}-\d{2})\s")
OLD_HEADER = re.compile(r"^[A-Z][a-z]{2} ([A-Z][a-z]{2}) +(\d{1,2}) [\d:]+ (?:[A-Z]{3,4} )?(\d{4})\b")
EMAIL = re.compile(r"[<(]?[\w.+-]+@[\w-]+(?:\.[\w-]+)+[>)]?")
NAMING = re.compile(
    r"(reported|patch|patches|contributed|suggested|written|based on work|from)\s+by\b|thanks to", re.IGNORECASE
)


def header_date(line: str) -> str | None:
    """The ISO date of an entry's header line, None for any other line.

    >>> header_date("2000-02-28  A Person  <a@example.org>"), header_date("Mon Jul 22 17:06:24 1991  A  (a@b.c)")
    ('2000-02-28', '1991-07-22')
    >>> header_date("\\t* io/open.c: New file.") is None
    True
    """
    match = ISO_HEADER.match(line)
    if match:
        return match.group(1)
    match = OLD_HEADER.match(line)
    if match:
        month, day, year = match.groups()
        return f"{year}-{datetime.strptime(month, '%b').month:02d}-{int(day):02d}"
    return None


def real_date(date: str) -> bool:
    """Whether an ISO date exists (a few headers carry typos such as 1997-02-29).

    >>> real_date("1997-02-28"), real_date("1997-02-29")
    (True, False)
    """
    try:
        datetime.strptime(date, "%Y-%m-%d")
    except ValueError:
        return False
    return True


def entries(path: Path) -> list[tuple[str, str]]:
    """The (date, body) of every entry of one ChangeLog file, people and addresses removed."""
    found: list[tuple[str | None, list[str]]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("Local Variables:"):
            break
        date = header_date(line)
        if date is not None:
            if not real_date(date):  # a typo: the entry goes with the one written just before it
                date = found[-1][0] if found else None
            found.append((date, []))
        elif found and not NAMING.search(line):
            found[-1][1].append(EMAIL.sub("", line).rstrip())
    return [
        (date, "\n".join(body).strip("\n"))
        for date, body in found
        if date is not None and any(line.strip() for line in body)
    ]


def build(folder: Path, out: Path) -> tuple[int, int]:
    """Write the stream; returns (documents, UTF-8 bytes of text)."""
    days: dict[str, list[str]] = defaultdict(list)
    for path in sorted(folder.glob("ChangeLog*"), key=lambda p: p.name):
        for date, body in entries(path):
            days[date].append(body)
    size = documents = 0
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for date in sorted(days):
            for k, text in enumerate(days[date]):
                size += len(text.encode("utf-8"))
                documents += 1
                record = {"id": f"glibc-{date}-{k}", "ts": f"{date}T00:00:00Z", "text": text}
                f.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
    return documents, size


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    documents, size = build(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"{documents:,} documents, {size / 1e6:.1f} MB of text -> {sys.argv[2]}")
