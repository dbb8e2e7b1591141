"""Build ``python-peps.jsonl.gz``: the Python Enhancement Proposals as a drifting stream.

Reads the ``pep-NNNN.rst`` files of the python/peps repository (design documents, 1996 to
today) and writes each PEP as a run of documents of ~200 to ~700 bytes (its title, then
its sections split at paragraph boundaries), every one dated by the PEP's ``Created:`` header, as
``{"id", "ts", "text"}`` JSON lines in time order (PEPs of one day by number, a PEP's parts in
order). Only PEPs whose Copyright section places them in the public domain (or under CC0-1.0) are
kept. The reStructuredText source is kept as written, but for what could name people: the header
(authors, their e-mail addresses, sponsors, delegates, discussion links) and the Copyright,
References, Footnotes, Acknowledgements and Release Manager sections are dropped, as are e-mail
addresses and lines naming people (``Reported by``, ``Suggested by``, ``Thanks to``, ...).

Get the tree (commit ba4deeb7969588d937da609008d05bb83a47b1ab, 2026-08-22) and run::

    git clone https://github.com/python/peps && git -C peps checkout ba4deeb7969588d937da609008d05bb83a47b1ab
    python3 data/build_python_peps.py peps/peps data/python-peps.jsonl.gz
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from datetime import datetime
from pathlib import Path

PEP_FILE = re.compile(r"^pep-(\d{4})\.rst$")
UNDERLINE = re.compile(r"^([=\-~^*\"`#+'.:_])\1{2,}\s*$")
EMAIL = re.compile(r"[<(]?[\w.+-]+@[\w-]+(?:\.[\w-]+)+[>)]?")
NAMING = re.compile(
    r"(reported|patch|patches|contributed|suggested|written|based on work|sponsored)\s+by\b"
    r"|thanks to|\bthanks\b.*\bfor\b|\bcredits?\b",
    re.IGNORECASE,
)
DROPPED = re.compile(
    r"^(copyright|references?|footnotes?|acknowledge?ments?|credits|"
    r"release manager and crew|authors?)$",
    re.IGNORECASE,
)
MIN_BYTES, MAX_BYTES = 200, 700


def header(text: str) -> tuple[dict[str, str], list[str]]:
    """A PEP's RFC 822 header fields (continuation lines joined) and the lines of its body.

    >>> header("PEP: 8\\nTitle: Style\\nAuthor: A <a@b.c>,\\n    B\\n\\nAbstract\\n========\\n")
    ({'PEP': '8', 'Title': 'Style', 'Author': 'A <a@b.c>, B'}, ['Abstract', '========'])
    """
    lines = text.splitlines()
    fields: dict[str, str] = {}
    key = ""
    for n, line in enumerate(lines):
        if not line.strip():
            return fields, lines[n + 1 :]
        if line[0].isspace() and key:
            fields[key] += " " + line.strip()
        else:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields, []


def created(value: str) -> str:
    """The ISO date of a ``Created:`` header.

    >>> created("05-Jul-2001")
    '2001-07-05'
    """
    return datetime.strptime(value.strip(), "%d-%b-%Y").strftime("%Y-%m-%d")


def sections(body: list[str]) -> list[tuple[str, int, list[str]]]:
    """The body as (title, level, lines) sections, a heading's lines (title and underline, and
    overline if any) leading its section; level 0 is the text before the first heading."""
    styles: list[tuple[bool, str]] = []
    out: list[tuple[str, int, list[str]]] = [("", 0, [])]
    n = 0
    while n < len(body):
        line = body[n]
        nxt = body[n + 1] if n + 1 < len(body) else ""
        over = UNDERLINE.match(line) and n + 2 < len(body) and UNDERLINE.match(body[n + 2]) and body[n + 1].strip()
        if over:
            style, title, width = (True, line.strip()[0]), body[n + 1].strip(), 3
        elif line.strip() and not line[0].isspace() and UNDERLINE.match(nxt) and len(nxt.strip()) >= len(line.strip()):
            style, title, width = (False, nxt.strip()[0]), line.strip(), 2
        else:
            out[-1][2].append(line)
            n += 1
            continue
        if style not in styles:
            styles.append(style)
        out.append((title, styles.index(style) + 1, body[n : n + width]))
        n += width
    return out


def kept(parts: list[tuple[str, int, list[str]]]) -> list[list[str]]:
    """The lines of every section not dropped (a dropped section takes its subsections along)."""
    out: list[list[str]] = []
    dropping = 0
    for title, level, lines in parts:
        if dropping and level > dropping:
            continue
        dropping = level if DROPPED.match(title.strip()) else 0
        if not dropping:
            out.append(lines)
    return out


def public_domain(parts: list[tuple[str, int, list[str]]]) -> bool:
    """Whether the PEP's Copyright section places it in the public domain (or under CC0-1.0)
    and claims no other copyright or licence."""
    text = " ".join(" ".join(lines) for title, _, lines in parts if title.strip().lower() == "copyright").lower()
    return "public domain" in text and not re.search(r"copyright \(c\)|open publication|their license", text)


def clean(lines: list[str]) -> list[str]:
    """Lines without e-mail addresses and without the lines naming people."""
    return [EMAIL.sub("", line).rstrip() for line in lines if not NAMING.search(line)]


def paragraphs(lines: list[str]) -> list[str]:
    """The blocks of text between blank lines."""
    out, block = [], []
    for line in lines + [""]:
        if line.strip():
            block.append(line)
        elif block:
            out.append("\n".join(block))
            block = []
    return out


def chunks(first: str, blocks: list[list[str]]) -> list[str]:
    """Documents of a PEP: paragraphs packed in order up to MAX_BYTES, a new one at a section
    that starts when the current one holds MIN_BYTES (a longer paragraph stays whole)."""
    docs: list[list[str]] = [[first]]
    for lines in blocks:
        paras = paragraphs(clean(lines))
        if not paras:
            continue
        if size(docs[-1]) >= MIN_BYTES:
            docs.append([])
        for para in paras:
            if docs[-1] and size(docs[-1]) + len(para.encode("utf-8")) > MAX_BYTES:
                docs.append([])
            docs[-1].append(para)
    return ["\n\n".join(doc) for doc in docs if doc]


def size(doc: list[str]) -> int:
    """UTF-8 bytes of a document's paragraphs."""
    return sum(len(p.encode("utf-8")) + 2 for p in doc)


def pep(path: Path) -> tuple[str, int, list[str]] | None:
    """(creation date, number, documents) of one PEP file, None when it is not in the public domain."""
    fields, body = header(path.read_text(encoding="utf-8"))
    parts = sections(body)
    if not public_domain(parts):
        return None
    number = int(fields["PEP"])
    return created(fields["Created"]), number, chunks(f"PEP {number} – {fields['Title']}", kept(parts))


def build(folder: Path, out: Path) -> tuple[int, int, int]:
    """Write the stream; returns (PEPs, documents, UTF-8 bytes of text)."""
    peps = [p for p in (pep(path) for path in sorted(folder.iterdir()) if PEP_FILE.match(path.name)) if p]
    size_ = documents = 0
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for date, number, docs in sorted(peps, key=lambda p: (p[0], p[1])):
            for k, text in enumerate(docs):
                size_ += len(text.encode("utf-8"))
                documents += 1
                record = {"id": f"pep-{number:04d}-{k}", "ts": f"{date}T00:00:00Z", "text": text}
                f.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
    return len(peps), documents, size_


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    peps, documents, size = build(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"{peps:,} PEPs, {documents:,} documents, {size / 1e6:.1f} MB of text -> {sys.argv[2]}")
