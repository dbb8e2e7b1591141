"""Build ``debian-changelog.jsonl.gz``: Debian package changelogs of many projects as a drifting stream.

Every 4th source package of Debian 12 "bookworm" (12.15, main, amd64; sorted by name) whose
smallest binary package is at most 300 kB: that binary's ``/usr/share/doc/*/changelog.Debian.gz``
(as installed: debhelper keeps the entries since about 2019 and drops older ones in many
packages). One document per changelog entry (its ``package (version) distribution; urgency=...``
line and its items; an entry over ~3 KB is split between items, each part with the entry's date),
as ``{"id", "ts", "text"}`` JSON lines in time order (the entry's signature time in UTC, then
package name, then file order). Dropped: the signature line (name, e-mail address, date),
``[ Name ]`` lines of team uploads, e-mail addresses, and every item naming people or roles
(``Thanks to``, ``Patch from``, ``Reported by``, ``by``/``from`` a capitalised name, ``Jane
Doe's``, ``Jane's patch``, ``Sponsored by``, maintainer and uploader changes, ...); entries with a
date that does not parse or lies outside 1993-08..2025-06 are left out. An entry that two
packages' changelogs share (same package and version) is written once.

Reproduce (the binaries' pool files are plain HTTP, no install needed)::

    curl -O http://deb.debian.org/debian/dists/bookworm/main/binary-amd64/Packages.xz  # sha256 9e0b5aab...
    python3 data/build_debian_changelog.py urls Packages.xz > urls.txt
    mkdir debs && wget -q -P debs -i urls.txt
    python3 data/build_debian_changelog.py build debs data/debian-changelog.jsonl.gz
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import re
import sys
import tarfile
from collections import defaultdict
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path

MIRROR = "http://deb.debian.org/debian/"
EVERY, MAX_DEB_BYTES = 4, 300_000
FIRST, LAST = datetime(1993, 8, 1, tzinfo=timezone.utc), datetime(2025, 7, 1, tzinfo=timezone.utc)
MAX_BYTES = 3000
HEADER = re.compile(r"^(\S+) \(([^()\s]+)\) [^;]*;.*$")
TRAILER = re.compile(r"^ -- .*?  (\S.*)$")
ITEM = re.compile(r"^\s*[*+-] ")
TEAM_MARKER = re.compile(r"^\s*\[ .* \]\s*$")
EMAIL = re.compile(r"[<(]?[\w.+-]+@[\w-]+(?:\.[\w-]+)+[>)]?")
NAMING = re.compile(
    r"\b(reported|patch|patches|contributed|suggested|written|based on work|sponsored|uploaded"
    r"|upload|prepared|provided|noticed|spotted|requested|work|packaged|co-authored|signed-off)\s+by\b"
    r"|\bthanks?\b|\bthank you\b|\bcredits?\b|\bkudos\b|\bmaintainers?\b|\buploaders?\b|\bmyself\b"
    r"|\bNMU\b|\bsponsor|\badopt"
    r"|\b(patch|patches|changes|suggestion|idea|help|diff|input|contribution|hint|e-?mail)\s+from\b",
    re.IGNORECASE,
)
# "by Jane Doe", "from J. Random Hacker", "Jane Doe's", "Jane's patch" (it takes "from Debian
# Policy" along: a small loss).
PERSON = re.compile(
    r"\b(?:by|from|via|cc|thx)\s+(?:[A-ZÀ-Þ][\w'-]*\.?\s+){1,3}[A-ZÀ-Þ][\w'-]+"
    r"|[A-ZÀ-Þ][\w-]+ [A-ZÀ-Þ][\w-]+'s\b"
    r"|\b[A-ZÀ-Þ][\w-]+'s (?:patch|patches|fix|fixes|work|changes?|advice|solution|suggestions?"
    r"|ideas?|e-?mail|contact|notes|version|comments?|help|review)\b"
)


def stanzas(packages: str) -> list[dict[str, str]]:
    """The stanzas of a Packages file as field dictionaries (single-line fields only).

    >>> stanzas("Package: a\\nSize: 3\\nDescription: x\\n more\\n\\nPackage: b\\n")
    [{'Package': 'a', 'Size': '3', 'Description': 'x'}, {'Package': 'b'}]
    """
    out = []
    for block in packages.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line[0].isspace())
        if fields:
            out.append(fields)
    return out


def urls(packages_xz: Path) -> list[str]:
    """The pool URL of the smallest binary of every EVERY-th source package (by name), when it
    is at most MAX_DEB_BYTES."""
    binaries: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for fields in stanzas(lzma.open(packages_xz, "rt", encoding="utf-8").read()):
        source = fields.get("Source", fields["Package"]).split()[0]
        binaries[source].append((int(fields["Size"]), fields["Filename"]))
    chosen = (min(binaries[name]) for name in sorted(binaries)[::EVERY])
    return [MIRROR + filename for size, filename in chosen if size <= MAX_DEB_BYTES]


def ar_members(data: bytes) -> dict[str, bytes]:
    """The members of an ``ar`` archive (a ``.deb``) by name."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    members, pos = {}, 8
    while pos + 60 <= len(data):
        name, size = data[pos : pos + 16].decode().strip().rstrip("/"), int(data[pos + 48 : pos + 58])
        members[name] = data[pos + 60 : pos + 60 + size]
        pos += 60 + size + size % 2
    return members


def changelog(deb: Path) -> str | None:
    """The text of a ``.deb``'s ``changelog.Debian.gz``, None where it has none (a symlinked
    doc folder) or its data archive cannot be read."""
    members = ar_members(deb.read_bytes())
    data = next((v for k, v in sorted(members.items()) if k.startswith("data.tar")), None)
    if data is None:
        return None
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar:
                if member.isfile() and re.fullmatch(r"\./usr/share/doc/[^/]+/changelog\.Debian\.gz", member.name):
                    return gzip.decompress(tar.extractfile(member).read()).decode("utf-8", errors="replace")
    except (tarfile.TarError, lzma.LZMAError, OSError, EOFError):
        return None
    return None


def items(lines: list[str]) -> list[list[str]]:
    """An entry's body as items: a line opening a ``*``/``+``/``-`` item (or following a blank
    line) starts one, other lines continue it."""
    out: list[list[str]] = []
    blank = True
    for line in lines:
        if not line.strip():
            blank = True
            continue
        if blank or ITEM.match(line) or not out:
            out.append([])
        out[-1].append(line.rstrip())
        blank = False
    return out


def clean(lines: list[str]) -> list[list[str]]:
    """An entry's items without team markers and items naming people, addresses removed."""
    return [
        [EMAIL.sub("", line).rstrip() for line in item]
        for item in items(lines)
        if not any(NAMING.search(line) or PERSON.search(line) or TEAM_MARKER.match(line) for line in item)
    ]


def parse_date(text: str) -> datetime | None:
    """A signature's date in UTC, None where it does not parse or lies outside FIRST..LAST.

    >>> parse_date("Tue, 21 Aug 2018 18:11:49 +0200").isoformat()
    '2018-08-21T16:11:49+00:00'
    >>> parse_date("sometime in 1997") is None
    True
    """
    try:
        when = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    when = when.astimezone(timezone.utc)
    return when if FIRST <= when < LAST else None


def entries(text: str) -> list[tuple[datetime, str, str, str, list[list[str]]]]:
    """(date, package, version, header line, cleaned items) of every dated entry."""
    out = []
    current: tuple[str, str, str] | None = None
    body: list[str] = []
    for line in text.splitlines():
        header = HEADER.match(line)
        if header:
            current, body = (header.group(1), header.group(2), line.strip()), []
        elif current and TRAILER.match(line):
            when = parse_date(TRAILER.match(line).group(1))
            cleaned = clean(body)
            if when is not None and cleaned:
                out.append((when, *current, cleaned))
            current = None
        elif current:
            body.append(line)
    return out


def split(header: str, body: list[list[str]]) -> list[str]:
    """An entry as documents of at most ~MAX_BYTES (an item stays whole), cut between items;
    the first starts with the header line."""
    docs: list[list[str]] = [[]]
    room = MAX_BYTES - len(header.encode("utf-8"))
    for item in body:
        text = "\n".join(item)
        if docs[-1] and len(text.encode("utf-8")) + 1 > room:
            docs.append([])
            room = MAX_BYTES
        docs[-1].append(text)
        room -= len(text.encode("utf-8")) + 1
    docs[0] = [header, ""] + docs[0]
    return ["\n".join(doc) for doc in docs]


def build(folder: Path, out: Path) -> tuple[int, int, int]:
    """Write the stream; returns (packages with a changelog, documents, UTF-8 bytes of text)."""
    found: dict[tuple[str, str], tuple[datetime, str, list[list[str]]]] = {}
    packages = 0
    for deb in sorted(folder.glob("*.deb")):
        text = changelog(deb)
        if text is None:
            continue
        packages += 1
        for when, package, version, header, body in entries(text):
            found.setdefault((package, version), (when, header, body))
    size = documents = 0
    order = sorted(found.items(), key=lambda kv: (kv[1][0], kv[0][0]))
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for (package, version), (when, header, body) in order:
            for k, text in enumerate(split(header, body)):
                size += len(text.encode("utf-8"))
                documents += 1
                record = {
                    "id": f"debian-{package}-{version}-{k}",
                    "ts": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "text": text,
                }
                f.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
    return packages, documents, size


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "urls":
        print("\n".join(urls(Path(sys.argv[2]))))
    elif len(sys.argv) == 4 and sys.argv[1] == "build":
        packages, documents, size = build(Path(sys.argv[2]), Path(sys.argv[3]))
        print(f"{packages:,} packages, {documents:,} documents, {size / 1e6:.1f} MB of text -> {sys.argv[3]}")
    else:
        sys.exit(__doc__)
