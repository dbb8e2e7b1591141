"""``tokmaint ingest``: the pipeline's commands (the Beam job and the operator commands join here)."""

from __future__ import annotations

import argparse

from tokmaint.cli import print_result, show_progress


def cmd_ingest(args: argparse.Namespace) -> int:
    from pipeline.ingest import ingest
    from pipeline.topics import PipelineSettings

    chosen = {k: v for k, v in (("bootstrap", args.bootstrap), ("docs_topic", args.topic),
                                ("dlq_topic", args.dlq_topic), ("max_record_bytes", args.max_record_bytes))
              if v is not None}
    report = ingest(args.corpus, PipelineSettings(**chosen), skip_bad=args.skip_bad, progress=show_progress(args),
                    compression=None if args.compression == "none" else args.compression)
    print_result(report, as_json=args.json)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    ingest = sub.add_parser("ingest", help="send a corpus's documents to the docs topic (Kafka)")
    ingest.add_argument("corpus", help="a JSONL(.gz) or .txt(.gz) corpus")
    ingest.add_argument("--bootstrap", help="Kafka bootstrap servers (default: TOKMAINT_KAFKA or 127.0.0.1:9092)")
    ingest.add_argument("--topic", help="the documents' topic (default: TOKMAINT_PIPELINE_DOCS_TOPIC or docs)")
    ingest.add_argument("--dlq-topic", help="the dead-letter topic (default: TOKMAINT_PIPELINE_DLQ_TOPIC or "
                                            "docs.dlq)")
    ingest.add_argument("--max-record-bytes", type=int, help="larger documents are dead-lettered (default: "
                                                             "TOKMAINT_PIPELINE_MAX_RECORD_BYTES or 1 MiB)")
    ingest.add_argument("--compression", choices=["gzip", "zstd", "none"], default="gzip",
                        help="batch compression (default: gzip)")
    ingest.add_argument("--skip-bad", action="store_true",
                        help="dead-letter the corpus's bad records (with the reason and line) instead of stopping")
    ingest.add_argument("--json", action="store_true", help="print JSON")
    ingest.set_defaults(func=cmd_ingest, parser=ingest)
