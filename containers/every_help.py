"""Run inside an image (``docker run -i --entrypoint python IMAGE - < containers/every_help.py``):
``tokmaint ... --help`` of every command and subcommand exits 0; prints how many there are."""

import argparse
import subprocess
import sys

from tokmaint.cli import build_parser


def paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """Every command path below ``parser`` (the lazy commands' options built as they are reached)."""
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name in list(action.choices):
                sub = action.build(name) if hasattr(action, "build") else action.choices[name]
                yield from paths(sub, prefix + (name,))


commands = list(paths(build_parser()))
failed = [" ".join(p) for p in commands if subprocess.run(["tokmaint", *p, "--help"], capture_output=True).returncode]
if failed:
    sys.exit(f"--help failed: {failed}")
print(f"--help: {len(commands)} commands")
