"""Run the CLI as a user would and read its ``--json`` answer."""

import json

from tokmaint.cli import main


def run_json(capsys, *argv):
    """``tokmaint *argv --json`` in this process: it exits 0, and its output parsed."""
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)
