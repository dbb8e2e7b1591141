"""tokmaint/cli.py: what every command shares: its imports, its help, its options' numbered choices."""

import argparse

import pytest


def test_a_command_imports_only_its_own_modules():
    """``tokmaint --help`` imports no command's module, and ``evolve`` none of the services' or the
    trainer's packages (seconds of start-up; a `regex` finalizer in transformers once ate a SIGTERM)."""
    import subprocess
    import sys

    extras = ("torch", "transformers", "pyflink", "kafka", "confluent_kafka", "redis", "sqlalchemy", "fastapi", "httpx")
    for argv, unwanted in (
        (["--help"], ("tokmaint.commands.tokenizer", "numpy", *extras)),
        (["evolve", "--help"], extras),
        (["trainer", "run", "--help"], ("torch", "transformers")),
    ):
        probe = (
            f"import contextlib, io, sys; from tokmaint.cli import build_parser\n"
            f"with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            f"    build_parser().parse_args({argv!r})\n"
            f"print(sorted(m for m in {unwanted!r} if m in sys.modules))"
        )
        imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        assert (argv, imported.stdout.strip()) == (argv, "[]")


def _command_lines(parser, prefix=()):
    """Every command line that names a command (``registry serve``, ``bench drift`` ...)."""
    from tokmaint.cli import LazyCommands

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name in list(action.choices):
                sub = action.build(name) if isinstance(action, LazyCommands) else action.choices[name]
                yield (*prefix, name)
                yield from _command_lines(sub, (*prefix, name))


def test_every_command_has_help(capsys):
    from tokmaint.cli import BENCHES, COMMANDS, build_parser

    lines = list(_command_lines(build_parser()))
    assert {(name,) for name, _, _ in COMMANDS} | {("bench", name) for name, _, _ in BENCHES} <= set(lines)
    assert {("registry", "serve"), ("pipeline", "run"), ("stats", "snapshot"), ("trainer", "run")} <= set(lines)
    for argv in lines:
        with pytest.raises(SystemExit) as stop:
            build_parser().parse_args([*argv, "--help"])
        assert stop.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: tokmaint {' '.join(argv)}")


def test_a_setting_of_numbered_choices_takes_a_number():
    from tokmaint.cli import build_parser

    args = build_parser().parse_args(["bench", "zip2zip", "--corpus", "c", "--tokenizer", "t", "--layers", "0"])
    assert args.layers == 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "zip2zip", "--corpus", "c", "--tokenizer", "t", "--layers", "3"])
