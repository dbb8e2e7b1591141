"""The commands, a module a group of them (``tokmaint.cli.COMMANDS`` names each), and here the
options that several groups' commands share."""

from __future__ import annotations

import argparse

from pipeline.parts import DEFAULT_WAIT_SECONDS
from tokenizer_service.settings import Number
from tokmaint.options import port as tcp_port


def add_server_options(parser: argparse.ArgumentParser, *, port: int) -> None:
    """``--host``, ``--port`` (``port`` by default), ``--insecure-dev`` and ``--log-level``: a command
    that serves HTTP as the registry's API does (``registry serve``, ``ingest-server``).

    >>> parser = argparse.ArgumentParser()
    >>> add_server_options(parser, port=8100)
    >>> parser.parse_args(["--insecure-dev"])
    Namespace(host='127.0.0.1', port=8100, insecure_dev=True, log_level='warning')
    """
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=tcp_port, default=port, help=f"port, 1 to 65,535 (default: {port})")
    parser.add_argument(
        "--insecure-dev",
        action="store_true",
        help="accept writes without a bearer token (development only; TOKMAINT_REGISTRY_TOKEN unset)",
    )
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])


def add_sample_corpus_option(parser: argparse.ArgumentParser, *, what: str) -> None:
    """``--corpus``: ``what`` a benchmark reads; without it (None) the benchmark reads the shipped git sample.

    >>> parser = argparse.ArgumentParser()
    >>> add_sample_corpus_option(parser, what="a JSONL(.gz) or .txt(.gz) corpus")
    >>> parser.parse_args([]).corpus is None
    True
    """
    parser.add_argument("--corpus", help=f"{what} (default: the shipped git sample, data/git-commits-sample.jsonl.gz)")


def add_wait_option(parser: argparse.ArgumentParser, *, waits_for: str) -> None:
    """``--wait SECONDS``: how long the command waits for ``waits_for`` (``pipeline.parts.wait_for``);
    once only, for a command whose option groups each ask for it.

    >>> parser = argparse.ArgumentParser()
    >>> add_wait_option(parser, waits_for="Redis")
    >>> add_wait_option(parser, waits_for="Redis")
    >>> parser.parse_args(["--wait", "2.5"]).wait, parser.parse_args([]).wait
    (2.5, 30.0)
    """
    if any(action.dest == "wait" for action in parser._actions):
        return
    parser.add_argument(
        "--wait",
        type=Number(float, low=0),
        default=DEFAULT_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"how long to wait for {waits_for} (default: {DEFAULT_WAIT_SECONDS:g})",
    )
