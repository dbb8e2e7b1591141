"""The README's commands run as written from a fresh clone: each parses with the CLI's own parser,
and every file it reads ships with the repository (or ../shared) or an earlier command writes it."""

import shlex
from pathlib import Path

from tokmaint.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[list[str]]:
    """The ``tokmaint`` command lines of the README's shell blocks (continuations joined)."""
    commands, in_block, pending = [], False, ""
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
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


def test_readme_commands_parse_and_read_what_exists_or_was_written():
    commands = readme_commands()
    assert {c[0] for c in commands} >= {"evolve", "residues", "bench"}
    written: list[Path] = []
    for argv in commands:
        args = build_parser().parse_args(argv)
        for name in ("corpus", "tokenizer"):
            values = getattr(args, name, None) or []
            for value in [values] if isinstance(values, str) else values:  # bench drift takes several
                path = Path(value)
                made_earlier = any(path.is_relative_to(out) for out in written)
                assert made_earlier or (ROOT / path).is_file(), f"README: {' '.join(argv)}: {value} does not exist"
        if getattr(args, "out", None):
            written.append(Path(args.out))
