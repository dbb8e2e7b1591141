"""The README's and the docs' commands run as written from a fresh clone: each parses with the CLI's
own parser, and every file it reads ships with the repository (or ../shared) or an earlier command
of the same page writes it. The README stays a manual of at most 300 lines, and every relative link
of the README and the docs points to a file that exists."""

import re
import shlex
from pathlib import Path

import pytest

from tokmaint.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").rglob("*.md"))
README_MAX_LINES = 300
# The options (argparse's dest) whose value is a file a command reads.
READS = ("corpus", "tokenizer", "data", "train", "diff")
# A Markdown link or image: [text](target) or [text](target "title").
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def sh_commands(page: Path) -> list[list[str]]:
    """The ``tokmaint`` command lines of a page's shell blocks, in order (continuations joined)."""
    commands, in_block, pending = [], False, ""
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_block = line.strip() == "```sh"
            continue
        if not in_block or line.lstrip().startswith("#"):
            continue
        pending += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            words = shlex.split(pending, comments=True)
            pending = ""
            if words and words[0].endswith("bin/tokmaint"):
                commands.append(words[1:])
    return commands


def readme_commands() -> list[list[str]]:
    """The ``tokmaint`` command lines of the README's shell blocks."""
    return sh_commands(ROOT / "README.md")


def check_commands(page: Path) -> None:
    """Each command of ``page`` parses, and reads only files that exist or that an earlier command of
    the same page writes (into its ``--out``)."""
    written: list[Path] = []
    name = page.relative_to(ROOT)
    for argv in sh_commands(page):
        args = build_parser().parse_args(argv)
        for dest in READS:
            values = getattr(args, dest, None) or []
            for value in [values] if isinstance(values, str) else values:  # bench drift takes several
                path = Path(value)
                made_earlier = any(path.is_relative_to(out) for out in written)
                assert made_earlier or (ROOT / path).is_file(), f"{name}: {' '.join(argv)}: {value} does not exist"
        if getattr(args, "out", None):
            written.append(Path(args.out))


def markdown_links(text: str) -> list[str]:
    r"""The targets of the links and images of Markdown ``text``, code (fenced or inline) left out.

    >>> markdown_links("[a](docs/cli.md) ![b](k8s/) [`c`](#d) `[e](f)`\n```\n[g](h)\n```\n[i](https://x.org)")
    ['docs/cli.md', 'k8s/', '#d', 'https://x.org']
    """
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [m.group(1) for m in LINK.finditer(text)]


def relative_links(page: Path) -> list[str]:
    """The targets of a page's links that name a file of the repository: not a URL, not an anchor of
    the page itself."""
    return [
        t
        for t in markdown_links(page.read_text(encoding="utf-8"))
        if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")
    ]


def test_readme_commands_parse_and_read_what_exists_or_was_written():
    commands = readme_commands()
    assert {c[0] for c in commands} >= {"evolve", "residues", "bench"}
    check_commands(ROOT / "README.md")


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_commands_parse_and_read_what_exists_or_was_written(page: Path):
    check_commands(page)


def test_the_docs_have_commands():
    assert any(sh_commands(page) for page in DOCS)


def test_readme_is_a_manual_of_at_most_300_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_that_exist(page: Path):
    for target in relative_links(page):
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.relative_to(ROOT)}: the link {target} names no file"
