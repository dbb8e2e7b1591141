"""The trainer's commands: ``tokmaint trainer run``, ``export`` and ``zip2zip``, ``tokmaint bench apply`` and
``bench arithmetic-train``."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

from tokmaint.commands import add_sample_corpus_option, add_wait_option
from tokmaint.options import add_bench_options, add_settings, chosen_settings, finish_command, lineage, port
from tokmaint.output import claim_file, print_result, replace_file, show_progress


def cmd_run(args: argparse.Namespace) -> int:
    from pipeline.config import PipelineSettings
    from pipeline.parts import wait_for_broker
    from registry.client import Outages, RegistryClient
    from registry.config import RegistryClientSettings
    from tokenizer_service.corpus import read_corpus
    from trainer.data import CorpusTexts, TopicTexts, held_out_split
    from trainer.hub import HubVersions
    from trainer.loop import Trainer, read_model_config
    from trainer.config import TrainerSettings

    if (args.data is None) == (args.docs_topic is None):
        args.parser.error("train on one of --data PATH or --topic NAME")
    # Checked before a step is taken; a report of this lineage's earlier run is replaced (a resume's).
    report_file = (
        claim_file(args.report, option="--report", force=args.force, ours=_report_of(args.lineage))
        if args.report
        else None
    )
    settings = chosen_settings(args.parser, args, TrainerSettings)
    stream = chosen_settings(args.parser, args, PipelineSettings)
    model_config = read_model_config(args.model_config, seq_len=settings.seq_len)
    texts, held_out = held_out_split(
        read_corpus(args.data).texts if args.data else None,
        read_corpus(args.eval_data).texts if args.eval_data else None,
        eval_docs=settings.eval_docs,
        eval_every=settings.eval_every,
    )
    events = (stream.bootstrap, stream.revisions_topic) if args.follow == "events" else None
    if args.hub:
        endpoint = args.registry or os.environ.get("HF_ENDPOINT") or RegistryClientSettings().url
        if not endpoint:
            args.parser.error("--hub reads from --registry, HF_ENDPOINT or TOKMAINT_REGISTRY_URL: set one")
    # The registry's client first: one that cannot be made (no URL) leaves no topic reader open.
    with nullcontext(HubVersions(endpoint)) if args.hub else RegistryClient(args.registry) as registry:
        outages = Outages(registry.endpoint, args.lineage)  # counted from the first request, for /metrics
        metrics = None
        if args.metrics_port is not None:
            from trainer.metrics import TrainerMetrics

            metrics = TrainerMetrics.create(args.lineage, outages)
            metrics.serve(args.metrics_port)
        if texts is None:  # as the pipeline's commands: a broker that does not answer is named as such
            wait_for_broker(stream.bootstrap, wait=args.wait)
        data = CorpusTexts(texts) if texts is not None else TopicTexts(stream)
        try:
            trainer = Trainer(
                registry=registry,
                lineage=args.lineage,
                data=data,
                settings=settings,
                model_config=model_config,
                checkpoint_dir=args.checkpoint_dir,
                events=events,
                held_out=held_out,
                progress=show_progress(args),
                outages=outages,
            )
        except BaseException:
            data.close()
            raise
        if metrics is not None:
            metrics.follow(trainer)
        try:
            # --steps is the total: a rerun of the same command after it finished trains no more.
            report = trainer.run(steps=max(args.steps - trainer.step, 0))
        finally:
            trainer.close()
    if report_file is not None:
        replace_file(report_file, json.dumps(report).encode("utf-8"))
    losses = report.pop("losses")
    report.pop("versions")
    report.pop("evaluations")
    print_result(
        {**report, "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None},
        as_json=args.json,
    )
    return 0


def _report_of(lineage: str) -> Callable[[bytes], bool]:
    """``claim_file``'s test of a file already at ``--report``: whether its bytes are the report of
    a ``trainer run`` of ``lineage`` (an earlier run's, which a resume replaces).

    >>> _report_of("news")(b'{"lineage": "news", "losses": []}'), _report_of("news")(b"my notes")
    (True, False)
    """

    def recognise(data: bytes) -> bool:
        try:
            report = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return False
        return isinstance(report, dict) and report.get("lineage") == lineage and "losses" in report

    return recognise


def cmd_export(args: argparse.Namespace) -> int:
    from tokenizer_service.output_dir import check_file_set
    from trainer.export import STAMP, export_model

    check_file_set(args.out, command="trainer export", legacy=STAMP)  # before the checkpoint is read
    try:
        tokenizer_json = Path(args.tokenizer).read_text(encoding="utf-8") if args.tokenizer else None
    except UnicodeDecodeError as exc:
        args.parser.error(f"argument --tokenizer: {args.tokenizer} is not UTF-8 text (byte {exc.start})")
    print_result(
        export_model(args.checkpoint, args.out, tokenizer_json=tokenizer_json, bos_id=args.bos_id), as_json=args.json
    )
    return 0


def cmd_zip2zip(args: argparse.Namespace) -> int:
    from trainer.config import Zip2zipSettings
    from trainer.zip2zip import train_zip2zip

    settings = chosen_settings(args.parser, args, Zip2zipSettings)
    print_result(
        train_zip2zip(args.model, args.corpus, args.out, settings, progress=show_progress(args)), as_json=args.json
    )
    return 0


def cmd_bench_apply(args: argparse.Namespace) -> int:
    from trainer.bench import run_apply_bench
    from trainer.config import ApplyBenchSettings

    print_result(run_apply_bench(chosen_settings(args.parser, args, ApplyBenchSettings)), as_json=args.json)
    return 0


def cmd_bench_distributed(args: argparse.Namespace) -> int:
    from trainer.distributed_bench import run_distributed_bench
    from trainer.config import DistributedBenchSettings

    settings = chosen_settings(args.parser, args, DistributedBenchSettings)
    print_result(run_distributed_bench(settings, corpus=args.corpus), as_json=args.json)
    return 0


def cmd_bench_arithmetic_train(args: argparse.Namespace) -> int:
    from trainer.arithmetic_train import run_arithmetic_train
    from trainer.config import ArithmeticTrainSettings

    settings = chosen_settings(args.parser, args, ArithmeticTrainSettings)
    print_result(run_arithmetic_train(settings, progress=show_progress(args)), as_json=args.json)
    return 0


def add_trainer(trainer: argparse.ArgumentParser) -> None:
    from pipeline.config import PipelineSettings
    from tokenizer_service.settings import whole
    from trainer.config import TrainerSettings, Zip2zipSettings

    commands = trainer.add_subparsers(dest="trainer_command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="train on a corpus with the lineage's current version, applying each newer "
        "version between two optimizer steps",
    )
    run.add_argument("--registry", help="the registry's URL (default: TOKMAINT_REGISTRY_URL)")
    run.add_argument("--lineage", type=lineage, required=True, help="the lineage to follow")
    run.add_argument("--data", help="JSONL(.gz) or .txt(.gz) to train on, in order, round and round")
    run.add_argument(
        "--topic",
        dest="docs_topic",
        metavar="TOPIC",
        help="or the documents' topic to train on, from its start, waiting for more at its end",
    )
    add_settings(run, PipelineSettings, only=("bootstrap", "revisions_topic"))
    add_wait_option(run, waits_for="the Kafka broker of --topic before stopping with its address")
    run.add_argument(
        "--hub",
        action="store_true",
        help="read the lineage's versions over the Hugging Face Hub protocol (huggingface_hub with "
        "HF_ENDPOINT at the registry: --registry's URL, or HF_ENDPOINT), as any training code "
        "reads a tokenizer, instead of the registry's own API",
    )
    run.add_argument(
        "--follow",
        choices=("watch", "events"),
        default="watch",
        help="learn of new versions by the registry's watch (default) or the revision events topic",
    )
    run.add_argument(
        "--steps",
        type=whole(0),
        default=1000,
        help="optimizer steps in all: a run resumed from --checkpoint-dir trains until the model has "
        "taken this many, so running the same command again does nothing more; a whole number ≥ 0 "
        "(default: 1000)",
    )
    run.add_argument("--model-config", help="a JSON object of GPT2Config fields over the tiny default")
    run.add_argument("--checkpoint-dir", help="checkpoint here, and resume from the checkpoint found here")
    run.add_argument(
        "--report",
        metavar="FILE",
        help="write the whole report here as JSON (every step's loss and version, the "
        "versions taken, the bits per byte on the held-out texts by step): a new file, or the "
        "report of an earlier run of this lineage",
    )
    run.add_argument("--force", action="store_true", help="replace a --report FILE that is no report of this lineage")
    run.add_argument(
        "--metrics-port",
        type=port,
        help="serve Prometheus metrics at :PORT/metrics: the steps, the version and the seconds "
        "without the registry (default: none)",
    )
    run.add_argument(
        "--eval-data",
        help="held-out texts to score the model on in bits per byte (JSONL(.gz) or "
        ".txt(.gz); default: the newest --eval-docs of --data, kept out of training)",
    )
    add_settings(run, TrainerSettings)
    finish_command(run, cmd_run)
    export = commands.add_parser(
        "export",
        help="write a checkpoint as a Hugging Face model folder (config, "
        "safetensors weights, the version's tokenizer.json) that "
        "from_pretrained loads",
    )
    export.add_argument("--checkpoint", required=True, help="the trainer's checkpoint (checkpoint.pt)")
    export.add_argument(
        "--out",
        required=True,
        help="the folder to write (new, empty, or one tokmaint exported: its "
        "files are replaced, any other file there is kept)",
    )
    export.add_argument("--tokenizer", help="the version's tokenizer.json, for a checkpoint that does not hold it")
    export.add_argument(
        "--bos-id",
        type=whole(0),
        help="the id a text starts from; a whole number ≥ 0 (default: the "
        "version's special token for it, such as <|endoftext|>)",
    )
    finish_command(export, cmd_export)
    zip2zip = commands.add_parser(
        "zip2zip",
        help="fine-tune a model on a corpus's LZW-compressed contexts (zip2zip "
        "hypertokens) and write it as a folder that generate --zip2zip and "
        "eval bytes --zip2zip read",
    )
    zip2zip.add_argument(
        "--model", required=True, help="a model folder (tokmaint trainer export) or a trainer checkpoint"
    )
    zip2zip.add_argument("--corpus", required=True, help="JSONL(.gz) or .txt(.gz) to fine-tune on, in order")
    zip2zip.add_argument(
        "--out",
        required=True,
        help="the folder to write (the model folder plus zip2zip.json and "
        "zip2zip.safetensors; new, empty, or one tokmaint wrote, but never --model's: its "
        "files are replaced, any other file there is kept; checked before the fine-tuning)",
    )
    add_settings(zip2zip, Zip2zipSettings)
    finish_command(zip2zip, cmd_zip2zip)


def add_bench_apply(bench: argparse.ArgumentParser) -> None:
    from trainer.config import ApplyBenchSettings

    add_bench_options(bench, ApplyBenchSettings, cmd_bench_apply)


def add_bench_distributed(bench: argparse.ArgumentParser) -> None:
    from trainer.config import DistributedBenchSettings

    add_sample_corpus_option(bench, what="the texts the ranks train on and the versions are made from")
    add_bench_options(bench, DistributedBenchSettings, cmd_bench_distributed)


def add_bench_arithmetic_train(bench: argparse.ArgumentParser) -> None:
    from trainer.config import ArithmeticTrainSettings

    add_bench_options(bench, ArithmeticTrainSettings, cmd_bench_arithmetic_train)
