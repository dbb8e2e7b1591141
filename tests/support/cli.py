"""Run the CLI as a user would: its exit code and output, or its ``--json`` answer read."""

import json
import sys

from tokmaint.cli import main

# Schedules that revise the drifting corpus (tests.conftest's 600 documents) within seconds:
# ``evolve``'s, and ``pipeline run``'s in steps of 32.
EVOLVE_OPTIONS = (
    "--vocab-size 300 --step-docs 10 --horizon-docs 30 --interval-docs 50 "
    "--warmup-docs 0 --batch-size 10 --init-share 0.3"
).split()
PIPELINE_OPTIONS = (
    "--step-docs 32 --horizon-docs 320 --interval-docs 64 --warmup-docs 64 --id-price 0 --base-token-cost 0"
).split()
# The load ramp of ``bench ingest`` and ``bench registry``: short steps, on a server held to two
# requests at once, so that it goes past the server's limit and the tests see it refuse.
OVERLOAD_RAMP = "--seconds 0.5 --start-rps 200 --max-rps 1600 --max-in-flight 2".split()


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


def lineage_options(redis_url: str, registry_url: str, lineage: str) -> list[str]:
    """The options that name a lineage's statistics and registry, as the pipeline's commands take them.

    >>> lineage_options("redis://r", "http://g", "news")
    ['--redis', 'redis://r', '--registry', 'http://g', '--lineage', 'news']
    """
    return ["--redis", redis_url, "--registry", registry_url, "--lineage", lineage]


def pipeline_run_command(broker: str, topic: str, *options: str) -> list[str]:
    """The command line of a ``tokmaint pipeline run`` process reading ``topic`` on ``broker``, with ``options``.

    >>> pipeline_run_command("127.0.0.1:9092", "docs", "--until-idle")[1:]
    ['-m', 'tokmaint.cli', 'pipeline', 'run', '--bootstrap', '127.0.0.1:9092', '--topic', 'docs', '--until-idle']
    """
    return [sys.executable, "-m", "tokmaint.cli", "pipeline", "run", "--bootstrap", broker, "--topic", topic, *options]
