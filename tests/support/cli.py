"""Run the CLI as a user would: its exit code and output, or its ``--json`` answer read."""

import json

from tokmaint.cli import main


def run_json(capsys, *argv):
    """``tokmaint *argv --json`` in this process: it exits 0, and its output parsed."""
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """main() as a process would end: its return code, or argparse's exit code."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err
