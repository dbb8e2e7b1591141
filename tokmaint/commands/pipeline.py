"""The pipeline's commands: ``tokmaint ingest``, ``ingest-server``, ``pipeline run``, ``revise``,
``residues-job``, ``stats show``, ``stats snapshot``, and ``bench pipeline`` and ``bench ingest``."""

from __future__ import annotations

import argparse
import json

from pipeline.parts import connect_redis, wait_for_broker
from tokenizer_service.settings import Number, whole
from tokmaint.commands import add_server_options, add_wait_option
from tokmaint.options import (
    add_bench_options,
    add_settings,
    chosen_settings,
    finish_command,
    free_text,
    lineage,
    port,
    settings_errors,
)
from tokmaint.output import print_result, show_progress

# What the pipeline's commands wait for, --wait seconds at the most.
WAITS_FOR = "Redis and the Kafka broker before stopping with the part's name and address"


def _pipeline_settings(args: argparse.Namespace):
    """The options over the environment's ``TOKMAINT_*`` settings; a bad value is a usage error."""
    from pipeline.config import PipelineSettings

    return chosen_settings(args.parser, args, PipelineSettings)


def _redis(args: argparse.Namespace) -> str:
    """The Redis URL: ``--redis`` over ``TOKMAINT_REDIS``."""
    return _pipeline_settings(args).redis


def cmd_ingest(args: argparse.Namespace) -> int:
    from pipeline.ingest import ingest

    settings = _pipeline_settings(args)
    wait_for_broker(settings.bootstrap, wait=args.wait)
    report = ingest(
        args.corpus,
        settings,
        skip_bad=args.skip_bad,
        progress=show_progress(args),
        compression=None if args.compression == "none" else args.compression,
    )
    print_result(report, as_json=args.json)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from pipeline.job import run_through_outages
    from registry.client import RegistryClient
    from tokenizer_service.evolve import StreamSettings

    stream = chosen_settings(args.parser, args, StreamSettings)
    metrics = None
    if args.metrics_port is not None:
        from pipeline.metrics import PipelineMetrics

        metrics = PipelineMetrics.create(args.lineage)
        metrics.serve(args.metrics_port)
    settings = _pipeline_settings(args)
    redis_client = connect_redis(settings.redis, wait=args.wait)
    # To the topic's end: a topic nobody sent to is a mistake, not an idle stream.
    wait_for_broker(settings.bootstrap, wait=args.wait, topic=settings.docs_topic if args.until_idle else None)
    with RegistryClient(args.registry) as registry:
        report = run_through_outages(
            settings=settings,
            stream=stream,
            redis_client=redis_client,
            registry=registry,
            lineage=args.lineage,
            metrics=metrics,
            max_steps=args.max_steps,
            until_idle=args.until_idle,
            wait=args.wait,
        )
    print_result(report, as_json=args.json)
    return 0


def cmd_revise(args: argparse.Namespace) -> int:
    from pipeline.lineage_statistics import LineageStatistics, RevisedMeanwhile
    from registry.client import RegistryClient
    from tokenizer_service.errors import TokmaintError
    from tokenizer_service.evolve import StreamSettings

    with RegistryClient(args.registry) as registry:
        stats = LineageStatistics(
            stream=chosen_settings(args.parser, args, StreamSettings),
            redis_client=connect_redis(_redis(args), wait=args.wait),
            registry=registry,
            lineage=args.lineage,
            existing=True,
        )
        meta = stats.store.meta()
        if not meta["step"]:
            raise TokmaintError(f"lineage {args.lineage!r} has no steps yet (run the pipeline first)")
        meanwhile = False
        try:
            revised = meta["revised"] < meta["step"] and stats.revise(meta["step"])
        except RevisedMeanwhile:
            # The pipeline (or another revise) revised these statistics first: the work is done,
            # nothing of ours was written. A CronJob beside a revising pipeline succeeds so.
            revised, meanwhile = False, True
        version = stats.store.meta()["version"] if meanwhile else stats.tedtok.version
    print_result(
        {
            "lineage": args.lineage,
            "step": meta["step"],
            "revised": revised,
            "already_revised_at_this_step": meta["revised"] >= meta["step"],
            "revised_meanwhile": meanwhile,
            "version": version,
        },
        as_json=args.json,
    )
    return 0


def cmd_residues_job(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pipeline.redis_store import RedisStatsStore
    from pipeline.residues_job import run_residues_job
    from registry.client import RegistryClient
    from tokenizer_service.residue_audit import ResidueOptions

    options = chosen_settings(args.parser, args, ResidueOptions)
    store = RedisStatsStore.open(connect_redis(_redis(args), wait=args.wait), lineage=args.lineage)
    with RegistryClient(args.registry) as registry:
        result = run_residues_job(
            store, registry, options=options, out=Path(args.out) if args.out else None, publish=args.publish
        )
    print_result(result, as_json=args.json)
    return 0


def cmd_stats_show(args: argparse.Namespace) -> int:
    from pipeline.redis_store import RedisStatsStore
    from pipeline.stats_report import stats_report
    from registry.client import RegistryClient

    store = RedisStatsStore.open(connect_redis(_redis(args), wait=args.wait), lineage=args.lineage)
    with RegistryClient(args.registry) as registry:
        version = store.meta()["version"] or registry.version(args.lineage).number
        tokenizer = registry.tokenizer(args.lineage, version)
    print_result(stats_report(store, tokenizer, top=args.top), as_json=args.json)
    return 0


def cmd_stats_snapshot(args: argparse.Namespace) -> int:
    from pipeline.redis_store import RedisStatsStore
    from pipeline.stats_report import stats_snapshot
    from registry.client import RegistryClient

    store = RedisStatsStore.open(connect_redis(_redis(args), wait=args.wait), lineage=args.lineage)
    with RegistryClient(args.registry) as registry:
        tokenizer = registry.tokenizer(args.lineage, store.meta()["version"] or "latest")
    folder = stats_snapshot(store, tokenizer, args.out)
    print_result(
        {"snapshot": str(folder), **json.loads((folder / "meta.json").read_text(encoding="utf-8"))}, as_json=args.json
    )
    return 0


def cmd_stats_hypertokens(args: argparse.Namespace) -> int:
    from registry.client import RegistryClient
    from tokenizer_service.corpus import read_corpus
    from tokenizer_service.lzw import contexts, merge_signal

    with RegistryClient(args.registry) as registry:
        version = registry.version(args.lineage, args.version or "latest").number
        tokenizer = registry.tokenizer(args.lineage, version)
    if args.corpus is not None:
        texts = read_corpus(args.corpus).texts
        source = args.corpus
    else:
        from pipeline.stream import topic_texts

        settings = _pipeline_settings(args)
        wait_for_broker(settings.bootstrap, wait=args.wait, topic=settings.docs_topic)
        texts = topic_texts(settings, wait=min(args.wait, 2.0))
        source = f"{settings.bootstrap}/{settings.docs_topic}"
    texts = texts[-args.documents :] if args.documents else texts
    windows = contexts(tokenizer.encode_batch(texts), context=args.context)
    print_result(
        {
            "lineage": args.lineage,
            "version": version,
            "source": source,
            "documents": len(texts),
            "context": args.context,
            **merge_signal(tokenizer, windows, max_merge=args.max_merge, top=args.top),
        },
        as_json=args.json,
    )
    return 0


def cmd_bench_pipeline(args: argparse.Namespace) -> int:
    from pipeline.bench import PipelineBenchSettings, run_pipeline_bench

    settings = chosen_settings(args.parser, args, PipelineBenchSettings)
    print_result(run_pipeline_bench(args.corpus, settings, progress=show_progress(args)), as_json=args.json)
    return 0


def cmd_bench_ingest(args: argparse.Namespace) -> int:
    from pipeline.ingest_bench import IngestBenchSettings, run_ingest_bench

    settings = chosen_settings(args.parser, args, IngestBenchSettings)
    print_result(run_ingest_bench(args.corpus, settings, progress=show_progress(args)), as_json=args.json)
    return 0


def cmd_ingest_server(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from pipeline.http_ingest import create_ingest_app
    from pipeline.config import IngestServerSettings
    from registry.api.lingering_close import serve
    from registry.config import RegistrySettings
    from tokenizer_service.errors import TokmaintError

    server = chosen_settings(args.parser, args, IngestServerSettings)
    try:  # the registry's write token, by the registry's rules
        registry = RegistrySettings(insecure_dev=args.insecure_dev)
    except ValidationError as exc:
        raise TokmaintError(settings_errors(exc, RegistrySettings)) from None
    app = create_ingest_app(
        _pipeline_settings(args),
        token=registry.token,
        insecure_dev=args.insecure_dev,
        max_records=server.max_records,
        limits=server.limits,
    )
    serve(app, host=args.host, port=args.port, log_level=args.log_level, head_seconds=server.receive_timeout)
    return 0


def _add_redis_options(parser: argparse.ArgumentParser) -> None:
    from pipeline.config import PipelineSettings

    add_settings(parser, PipelineSettings, only=("redis",))
    parser.add_argument("--registry", help="registry URL (default: TOKMAINT_REGISTRY_URL)")
    parser.add_argument("--lineage", type=lineage, required=True, help="the registry lineage")
    add_wait_option(parser, waits_for=WAITS_FOR)


def _add_stream_options(parser: argparse.ArgumentParser) -> None:
    from pipeline.config import PipelineSettings

    add_settings(
        parser,
        PipelineSettings,
        only=("bootstrap", "docs_topic", "dlq_topic", "max_record_bytes", "max_future_seconds"),
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_wait_option(parser, waits_for=WAITS_FOR)


def add_ingest(ingest: argparse.ArgumentParser) -> None:
    ingest.add_argument("corpus", help="a JSONL(.gz) or .txt(.gz) corpus")
    _add_stream_options(ingest)
    ingest.add_argument(
        "--compression",
        choices=["zstd", "gzip", "none"],
        default="zstd",
        help="batch compression (default: zstd: consumers decompress it ~6x cheaper than gzip)",
    )
    ingest.add_argument(
        "--skip-bad",
        action="store_true",
        help="dead-letter the corpus's bad records (with the reason and line) instead of stopping",
    )
    ingest.set_defaults(func=cmd_ingest, parser=ingest)


def add_ingest_server(server: argparse.ArgumentParser) -> None:
    from pipeline.config import IngestServerSettings

    _add_stream_options(server)
    add_server_options(server, port=8100)
    add_settings(server, IngestServerSettings)
    server.set_defaults(func=cmd_ingest_server, parser=server)


def add_pipeline(pipeline: argparse.ArgumentParser) -> None:
    from pipeline.config import PipelineSettings
    from tokenizer_service.evolve import StreamSettings

    commands = pipeline.add_subparsers(dest="pipeline_command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run", help="count the docs topic into a lineage's statistics step by step; revise and publish when due"
    )
    _add_stream_options(run)
    _add_redis_options(run)
    run.add_argument("--max-steps", type=whole(1), help="stop after this many steps (default: run on)")
    run.add_argument("--until-idle", action="store_true", help="stop when the topic has no more documents")
    run.add_argument("--metrics-port", type=port, help="serve Prometheus metrics at :PORT/metrics (default: none)")
    add_settings(run, PipelineSettings, only=("commit_steps", "step_seconds", "max_step_docs", "dedupe_steps"))
    add_settings(run, StreamSettings, skip=("vocab_size",))
    run.set_defaults(func=cmd_run, parser=run)
    add_flink(commands)


def add_flink(pipeline_commands: argparse._SubParsersAction) -> None:
    from pipeline.config import PipelineSettings
    from tokenizer_service.evolve import StreamSettings

    flink = pipeline_commands.add_parser(
        "flink",
        help="submit the scale-out job to a Flink cluster: pipeline run's steps as event-time windows "
        "(--step-seconds), counted on its TaskManagers",
    )
    _add_stream_options(flink)
    _add_redis_options(flink)
    flink.add_argument("--flink-master", required=True, help="the Flink cluster's REST address, HOST:PORT")
    flink.add_argument("--parallelism", type=whole(1), default=2, help="the job's parallelism (default: 2)")
    flink.add_argument(
        "--drain",
        action="store_true",
        help="instead of submitting: once the lineage's running job has read the topic to its end, "
        "stop it with a drain (every window left is written)",
    )
    flink.add_argument(
        "--stop-with-savepoint",
        metavar="DIR",
        nargs="?",
        const="",
        help="instead of submitting: stop the lineage's running job with a savepoint in DIR (default: the "
        "cluster's savepoint folder) and print its path, for --from-savepoint",
    )
    flink.add_argument(
        "--from-savepoint",
        metavar="PATH",
        help="start the job from this savepoint (--stop-with-savepoint's): an upgrade to a newer job, a rescale "
        "(another --parallelism) or a rollback (the older job from a savepoint it made)",
    )
    flink.add_argument(
        "--execution-mode",
        choices=["thread", "process"],
        default="thread",
        help="where the job's Python runs: thread, inside the TaskManagers' JVMs (needs Python's shared "
        "library there, libpython3.11.so), or process, Python workers of their own (slower; default: thread)",
    )
    flink.add_argument(
        "--max-lateness-seconds",
        type=Number(float, low=0),
        default=60.0,
        help="how far a document may be behind its partition's event time; a later one is dead-lettered (default: 60)",
    )
    add_settings(flink, PipelineSettings, only=("step_seconds", "dedupe_steps"))
    add_settings(flink, StreamSettings, skip=("vocab_size",))
    flink.set_defaults(func=cmd_flink, parser=flink)


def cmd_flink(args: argparse.Namespace) -> int:
    from pipeline.flink_job import MAX_STEP_SECONDS, MIN_STEP_SECONDS, FlinkJobSpec, jobmanager, submit
    from registry.config import RegistryClientSettings
    from tokenizer_service.evolve import StreamSettings

    settings = _pipeline_settings(args)
    if args.drain:
        from pipeline.flink_job import drain

        job = drain(args.flink_master, settings, args.lineage, wait=args.wait)
        print_result(
            {"lineage": args.lineage, "flink_master": args.flink_master, "job_id": job["jid"], "state": job["state"]},
            as_json=args.json,
        )
        return 0
    if args.stop_with_savepoint is not None:
        from pipeline.flink_job import stop_with_savepoint

        stopped = stop_with_savepoint(
            args.flink_master, args.lineage, directory=args.stop_with_savepoint or None, wait=args.wait
        )
        print_result({"lineage": args.lineage, "flink_master": args.flink_master, **stopped}, as_json=args.json)
        return 0
    if settings.step_seconds is None:
        args.parser.error("--step-seconds is required: the Flink job's steps are windows of event time")
    if not (window := Number(float, low=MIN_STEP_SECONDS, high=MAX_STEP_SECONDS)).allows(settings.step_seconds):
        args.parser.error(
            f"argument --step-seconds: must be {window.describe()} for the Flink job (its windows are whole "
            f"milliseconds, and Flink's intervals hold at most 999,999 days), got {settings.step_seconds:g}"
        )
    registry = args.registry or RegistryClientSettings().url
    if not registry:  # the job's writer reaches it from the TaskManagers: no default to guess
        args.parser.error("--registry (or TOKMAINT_REGISTRY_URL) is required: the job publishes there")
    spec = FlinkJobSpec(
        lineage=args.lineage,
        registry=registry,
        pipeline=settings,
        stream=chosen_settings(args.parser, args, StreamSettings),
        step_seconds=settings.step_seconds,
        max_lateness_seconds=args.max_lateness_seconds,
        parallelism=args.parallelism,
        execution_mode=args.execution_mode,
    )
    # What pipeline run finds before it starts, found here: on the cluster the job would fail and restart.
    _check_flink_parts(spec, wait=args.wait)
    jobmanager(args.flink_master, wait=args.wait)
    job_id = submit(spec, master=args.flink_master, savepoint=args.from_savepoint)
    print_result({"lineage": args.lineage, "flink_master": args.flink_master, "job_id": job_id}, as_json=args.json)
    return 0


def _check_flink_parts(spec, *, wait: float) -> None:
    """The registry and the lineage in it, Redis and the broker, as ``pipeline run`` needs them;
    and a lineage whose statistics end at a window ahead of the clock (the job would skip every
    document before it), each a :class:`~tokenizer_service.errors.TokmaintError` in one line."""
    from datetime import datetime, timedelta, timezone

    from pipeline.flink_job import WINDOW
    from pipeline.parts import wait_for_registry
    from pipeline.redis_store import RedisStatsStore
    from registry.client import RegistryClient
    from tokenizer_service.errors import TokmaintError

    wait_for_registry(spec.registry, wait=wait)
    with RegistryClient(spec.registry) as registry:
        registry.version(spec.lineage)  # "no lineage": refused here, not restarted on the cluster
    settings = spec.pipeline
    redis_client = connect_redis(settings.redis, wait=wait)
    wait_for_broker(settings.bootstrap, wait=wait)
    try:
        written = RedisStatsStore.open(redis_client, lineage=spec.lineage).meta()["offsets"].get(WINDOW)
    except TokmaintError:  # no statistics yet
        written = None
    finally:
        redis_client.close()
    now = datetime.now(timezone.utc)
    if written is not None and (end := datetime.fromtimestamp(written / 1000, timezone.utc)) > now + timedelta(
        seconds=settings.max_future_seconds
    ):
        raise TokmaintError(
            f"lineage {spec.lineage!r}'s statistics end at a window of {end.isoformat()}, ahead of the clock: a job "
            "would skip every document before it (docs/stream.md, 'A lineage whose event time ran ahead')"
        )


def add_revise(revise: argparse.ArgumentParser) -> None:
    from tokenizer_service.evolve import StreamSettings

    _add_redis_options(revise)
    # The decay is the statistics' own; the schedule is the job's.
    add_settings(
        revise, StreamSettings, skip=("vocab_size", "step_docs", "horizon_docs", "interval_docs", "warmup_docs")
    )
    finish_command(revise, cmd_revise)


def add_residues_job(residues: argparse.ArgumentParser) -> None:
    from tokenizer_service.residue_audit import ResidueOptions

    _add_redis_options(residues)
    add_settings(residues, ResidueOptions, skip=("log_base", "min_count", "batch_size"))
    residues.add_argument("--out", help="write tokenizer.json (residue-free), diff.json and scores.parquet here")
    residues.add_argument("--publish", action="store_true", help="publish the residue-free version (kind litetoken)")
    finish_command(residues, cmd_residues_job)


def add_stats(stats: argparse.ArgumentParser) -> None:
    from pipeline.config import PipelineSettings

    stats_commands = stats.add_subparsers(dest="stats_command", required=True, metavar="COMMAND")
    show = stats_commands.add_parser(
        "show", help="step, version, offsets, table sizes; top tokens and pairs by τ, weakest sinks"
    )
    _add_redis_options(show)
    show.add_argument("--top", type=whole(1), default=20, help="how many tokens, pairs and sinks (default: 20)")
    finish_command(show, cmd_stats_show)
    snapshot = stats_commands.add_parser(
        "snapshot", help="all of the statistics at one step to Parquet, for audit (OUT/<lineage>/step-<N>/)"
    )
    _add_redis_options(snapshot)
    snapshot.add_argument("--out", required=True, help="the folder snapshots go to")
    finish_command(snapshot, cmd_stats_snapshot)
    hyper = stats_commands.add_parser(
        "hypertokens",
        help="the runs of tokens zip2zip's LZW forms in the most of the "
        "stream's documents, with how many are tokens of the "
        "lineage's version already (candidates for Ted-Tok's merges)",
    )
    hyper.add_argument("--registry", help="registry URL (default: TOKMAINT_REGISTRY_URL)")
    hyper.add_argument("--lineage", type=lineage, required=True, help="the registry lineage")
    hyper.add_argument(
        "--version",
        type=free_text,
        help="the version whose tokens LZW runs over: a number, latest or an alias (default: latest)",
    )
    hyper.add_argument(
        "--corpus", help="read the documents from this JSONL(.gz) or .txt(.gz) corpus instead of the docs topic"
    )
    add_settings(hyper, PipelineSettings, only=("bootstrap", "docs_topic"))
    hyper.add_argument("--documents", type=whole(1), help="the newest N documents only (default: all)")
    hyper.add_argument(
        "--max-merge", type=whole(1, 64), default=3, help="most base tokens a hypertoken (M; default: 3)"
    )
    hyper.add_argument(
        "--context",
        type=whole(0),
        default=0,
        help="base tokens a context, cut from the documents' ids concatenated (default: 0, a "
        "document each: a count is then in how many documents LZW forms the run)",
    )
    hyper.add_argument("--top", type=whole(1), default=20, help="how many hypertokens to list (default: 20)")
    add_wait_option(hyper, waits_for=WAITS_FOR)
    finish_command(hyper, cmd_stats_hypertokens)


def add_bench_pipeline(bench: argparse.ArgumentParser) -> None:
    from pipeline.bench import PipelineBenchSettings

    add_bench_options(bench, PipelineBenchSettings, cmd_bench_pipeline, corpus="JSONL(.gz) or .txt(.gz) to stream")


def cmd_bench_flink(args: argparse.Namespace) -> int:
    from pipeline.flink_bench import FlinkBenchSettings, run_flink_bench

    settings = chosen_settings(args.parser, args, FlinkBenchSettings)
    if args.scaling:
        from pipeline.flink_bench import run_flink_scaling

        print_result(run_flink_scaling(args.corpus, settings, progress=show_progress(args)), as_json=args.json)
        return 0
    print_result(run_flink_bench(args.corpus, settings, progress=show_progress(args)), as_json=args.json)
    return 0


def add_bench_flink(bench: argparse.ArgumentParser) -> None:
    from pipeline.flink_bench import FlinkBenchSettings

    add_bench_options(bench, FlinkBenchSettings, cmd_bench_flink, corpus="timestamped JSONL(.gz) to stream")
    bench.add_argument(
        "--scaling",
        action="store_true",
        help="instead: the same stream with 1 TaskManager, then 2, each pinned to a CPU of its own (no kill, "
        "no savepoint); prints both runs and scaling_efficiency (the 2-TaskManager rate over twice the 1's)",
    )


def add_bench_ingest(load: argparse.ArgumentParser) -> None:
    from pipeline.ingest_bench import IngestBenchSettings

    add_bench_options(
        load, IngestBenchSettings, cmd_bench_ingest, corpus="JSONL(.gz) or .txt(.gz) the documents' texts come from"
    )
