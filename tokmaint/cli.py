"""``tokmaint``: the one command line, on top of every package it fronts.

Each command's module (``tokmaint.commands.*``) is imported, and its options built, only when that
command runs: ``tokmaint evolve`` needs numpy and tokenizers, not the registry's, the pipeline's or
the trainer's packages, and ``tokmaint --help`` imports none of them.

Errors a user can fix (a bad corpus, tokenizer, option, output directory or registry answer)
are one line on stderr and exit code 2 (``tokmaint --debug ...`` adds the traceback). Ctrl-C
stops cleanly with exit code 130 (SIGTERM: 143); what was written before stays complete. Output
whose reader went away (``| head``) ends the command quietly with exit code 0: the command's
work (a publish...) is done by the time it prints.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import traceback
from typing import Any, NoReturn

from pydantic_core import ValidationError

from tokenizer_service.errors import TokmaintError
from tokmaint.logs import configure

# Every command: its name, the function (``module:function``) that adds its options to its parser,
# and its one-line help. The order is --help's.
COMMANDS = (
    (
        "evolve",
        "tokmaint.commands.tokenizer:add_evolve",
        "replay a timestamped corpus through Ted-Tok, writing every version",
    ),
    (
        "residues",
        "tokmaint.commands.tokenizer:add_residues",
        "LiteToken: find a tokenizer's residues on a corpus and remove them",
    ),
    ("bench", "tokmaint.cli:add_bench", "reproducible benchmarks"),
    ("registry", "tokmaint.commands.registry:add_registry", "the versioned tokenizer registry: server and client"),
    ("ingest", "tokmaint.commands.pipeline:add_ingest", "send a corpus's documents to the docs topic (Kafka)"),
    (
        "ingest-server",
        "tokmaint.commands.pipeline:add_ingest_server",
        "take documents over HTTP (POST /v1/streams/{topic}/documents) onto the docs topic",
    ),
    (
        "pipeline",
        "tokmaint.commands.pipeline:add_pipeline",
        "the streaming job: Kafka -> statistics in Redis -> revisions",
    ),
    (
        "revise",
        "tokmaint.commands.pipeline:add_revise",
        "one Ted-Tok revision from a lineage's statistics in Redis, validated and published (what a CronJob runs)",
    ),
    (
        "residues-job",
        "tokmaint.commands.pipeline:add_residues_job",
        "LiteToken scores of a lineage's current version from the stream's statistics; --publish: a "
        "residue-removal version",
    ),
    ("stats", "tokmaint.commands.pipeline:add_stats", "a lineage's statistics in Redis"),
    ("trainer", "tokmaint.commands.trainer:add_trainer", "train a model that follows a lineage's versions"),
    (
        "eval",
        "tokmaint.commands.byte_level:add_eval",
        "byte-level evaluation of models across tokenizer versions (ByteSampler): exact prefix probabilities, bits "
        "per byte, the next byte",
    ),
    (
        "generate",
        "tokmaint.commands.byte_level:add_generate",
        "sample bytes after a prompt that may end anywhere, from one model or a byte-level ensemble",
    ),
    (
        "demo",
        "tokmaint.commands.demo:add_demo",
        "the whole loop on one machine: broker, Redis, registry, pipeline and a trainer on the shipped stream; "
        "a report folder",
    ),
)
BENCHES = (
    (
        "residues",
        "tokmaint.commands.tokenizer:add_bench_residues",
        "LiteToken Table 4 across tokenizer families: residue shares beside the paper's",
    ),
    ("arithmetic", "tokmaint.commands.tokenizer:add_bench_arithmetic", "Ted-Tok Table 2, synthetic arithmetic"),
    ("drift", "tokmaint.commands.tokenizer:add_bench_drift", "Old / New / Ted-Tok on a timestamped corpus"),
    (
        "throughput",
        "tokmaint.commands.tokenizer:add_bench_throughput",
        "stats update vs raw encoding; revision latency",
    ),
    (
        "registry",
        "tokmaint.commands.registry:add_bench_registry",
        "registry: publish latency (p50/p99) and tokenizer.json downloads/revalidations per second",
    ),
    (
        "pipeline",
        "tokmaint.commands.pipeline:add_bench_pipeline",
        "pipeline: end-to-end MB/s Kafka -> counting -> Redis vs raw encode_batch; per-step update time",
    ),
    (
        "flink",
        "tokmaint.commands.pipeline:add_bench_flink",
        "the scale-out job on a Flink cluster here, a TaskManager killed: equal to the replay, "
        "MB/s against pipeline run",
    ),
    (
        "ingest",
        "tokmaint.commands.pipeline:add_bench_ingest",
        "the request rate the ingest server serves within p99 500 ms, what it answers past it (503), and that "
        "every accepted document reached the topic once",
    ),
    (
        "apply",
        "tokmaint.commands.trainer:add_bench_apply",
        "apply: apply_revision's latency for K changed ids on a GPT-2-124M-shaped model with AdamW state",
    ),
    (
        "distributed",
        "tokmaint.commands.trainer:add_bench_distributed",
        "distributed: ranks of one DistributedDataParallel job following a lineage while versions are published: each "
        "version applied at the same step on every rank, embeddings identical, and the steps per second it costs",
    ),
    (
        "arithmetic-train",
        "tokmaint.commands.trainer:add_bench_arithmetic_train",
        "arithmetic-train: Ted-Tok Table 1, SA row: exact match of models trained with the Old, New and evolving "
        "tokenizers, and each init strategy's loss jump after a revision",
    ),
    (
        "lifelong",
        "tokmaint.commands.byte_level:add_bench_lifelong",
        "lifelong: two tiny models through a drifting stream, one with the first version for good, one taking each "
        "Ted-Tok version; bits per byte on the next part (and their byte-level ensemble), tokens processed",
    ),
    (
        "bytelevel",
        "tokmaint.commands.byte_level:add_bench_bytelevel",
        "bytelevel: ByteSampler's Tables 3-5 at our scale: model tokens per prefix, next-character accuracy and bits "
        "per character of byte-level conditioning against naive tokenization of the prefix",
    ),
    (
        "zip2zip",
        "tokmaint.commands.byte_level:add_bench_zip2zip",
        "zip2zip: LZW hypertokens over a tokenizer's ids, the tokens they save and, for a tiny model fine-tuned with "
        "and without them, bits per byte on held-out text",
    ),
    (
        "soak",
        "tokmaint.commands.demo:add_bench_soak",
        "soak: the whole system under load for --minutes while a seeded schedule kills its parts; checks that "
        "nothing was lost or counted twice",
    ),
)
EXIT_USAGE = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM, raised where the program is, so ``finally`` blocks run as for Ctrl-C."""


class Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line (the option, what it must be, and where help is)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # argparse drops a "--" from every option's values (on the command line it ends the
        # options), so `--text=--` reached the command as an empty list: given to an option of one
        # value, "--" is that value, checked by the option's type like any other.
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)


class LazyCommands(argparse._SubParsersAction):
    """Subcommands whose module is imported, and whose options are added, when one is chosen
    (argparse calls the action with the command's name before it parses the command's options)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._builders: dict[str, str] = {}

    def add_lazy(self, name: str, builder: str, help_text: str) -> argparse.ArgumentParser:
        """A command named ``name`` whose options ``builder`` (``module:function``) adds."""
        self._builders[name] = builder
        return self.add_parser(name, help=help_text, description=help_text)

    def build(self, name: str) -> argparse.ArgumentParser:
        """The command's parser with its options (imports its module the first time)."""
        if (builder := self._builders.pop(name, None)) is not None:
            module, function = builder.split(":")
            getattr(importlib.import_module(module), function)(self.choices[name])
        return self.choices[name]

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: list[str],
        option_string: str | None = None,
    ) -> None:
        self.build(values[0])
        super().__call__(parser, namespace, values, option_string)


def _add_lazy_commands(
    parser: argparse.ArgumentParser, commands: tuple[tuple[str, str, str], ...], *, dest: str
) -> LazyCommands:
    sub = parser.add_subparsers(dest=dest, required=True, action=LazyCommands, parser_class=Parser)
    for name, builder, help_text in commands:
        sub.add_lazy(name, builder, help_text)
    return sub


def add_bench(parser: argparse.ArgumentParser) -> None:
    """``tokmaint bench NAME``: each benchmark's module is imported when it runs."""
    _add_lazy_commands(parser, BENCHES, dest="bench")


def build_parser() -> Parser:
    """The whole command line; a command's options are added when it is parsed (``LazyCommands``)."""
    parser = Parser(prog="tokmaint", description="Lifelong BPE tokenizer maintenance.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    _add_lazy_commands(parser, COMMANDS, dest="command")
    return parser


def _terminate(signum: int, frame: Any) -> NoReturn:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    previous = signal.signal(signal.SIGTERM, _terminate)
    debug = False
    log = logging.getLogger("tokmaint")
    try:
        configure()
    except ValueError as exc:  # a bad TOKMAINT_LOG_FORMAT: say so, in the plain format
        configure("plain")
        log.warning("%s", exc)
    try:
        # Parsing imports the chosen command's module (numpy, tokenizers...): Ctrl-C there stops cleanly too.
        args = build_parser().parse_args(argv)
        debug = args.debug
        code: int = args.func(args)
        sys.stdout.flush()  # here, where a reader that went away is handled, not at exit
        return code
    except BrokenPipeError:
        # The reader of the output went away (`tokmaint ... | head`): what the command did is
        # done, only the rest of its output is lost. As Python's "Note on SIGPIPE" advises, what
        # is left to flush goes to devnull, so that the exit does not fail on it again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (TokmaintError, OSError) as exc:
        if debug:
            traceback.print_exc()
        log.error("%s", exc)
        return EXIT_USAGE
    except ValidationError as exc:  # settings made from the environment (TOKMAINT_*), outside an option's check
        if debug:
            traceback.print_exc()
        log.error("%s", "; ".join(f"{exc.title}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
        return EXIT_USAGE
    except ModuleNotFoundError as exc:
        # A command of the services or the trainer, installed with the core dependencies only.
        if debug:
            traceback.print_exc()
        log.error(
            "this command needs the Python package %r, which is not installed: pip install "
            "'tokmaint[services,trainer]' installs every command's",
            exc.name,
        )
        return EXIT_USAGE
    except KeyboardInterrupt:
        log.info("interrupted; everything written so far is complete")
        return EXIT_INTERRUPTED
    except Terminated:
        log.info("terminated; everything written so far is complete")
        return EXIT_TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
