"""The streaming Beam variant on Flink: ``python -m pipeline.flink_job --lineage news
--flink-master tokmaint-flink-rest:8081`` submits it to a Flink session cluster (the prod
overlay's FlinkDeployment, ``k8s/overlays/prod/flink.yaml``).

It reads the docs topic with Beam's ``ReadFromKafka`` (a cross-language transform: the runner
needs Java and Beam's Kafka expansion service, which this machine cannot fetch, so the job is
built and its options checked here, never run), windows documents by event time and writes each
window as a step of the lineage's statistics in Redis (``pipeline.beam_statistics``). The SDK
workers are the tokmaint image's Beam worker pool beside each TaskManager (``EXTERNAL``
environment). Records that are no Document are dropped here: the Python job dead-letters them.

>>> options = flink_options(build_parser().parse_args(["--lineage", "news", "--flink-master", "flink:8081"]))
>>> options.get_all_options()["runner"], options.get_all_options()["environment_type"]
('FlinkRunner', 'EXTERNAL')
"""

from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.topics import PipelineSettings
from registry.config import RegistryClientSettings
from tokenizer_service.evolve import StreamSettings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline.flink_job", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lineage", required=True, help="the registry lineage (created first)")
    parser.add_argument("--flink-master", required=True, help="the Flink session cluster's REST address")
    # Where the parts are: the same settings, and defaults, as every other command's.
    where, registry = PipelineSettings(), RegistryClientSettings()
    parser.add_argument("--bootstrap", default=where.bootstrap,
                        help="Kafka bootstrap servers (default: TOKMAINT_KAFKA or 127.0.0.1:9092)")
    parser.add_argument("--topic", default=where.docs_topic, help="the documents' topic (default: "
                                                                  "TOKMAINT_PIPELINE_DOCS_TOPIC or docs)")
    parser.add_argument("--redis", default=where.redis, help="Redis (default: TOKMAINT_REDIS or "
                                                             "redis://127.0.0.1:6379/0)")
    parser.add_argument("--registry", default=registry.url, help="the registry's URL (default: TOKMAINT_REGISTRY_URL)")
    parser.add_argument("--step-seconds", type=float, default=3600.0, help="a step: this many seconds of event time")
    parser.add_argument("--step-docs", type=int, default=1024, help="a window's documents on average (it turns "
                                                                    "the horizon, interval and warmup into steps)")
    parser.add_argument("--worker-pool", default="localhost:50000", help="the Beam worker pool beside each "
                                                                         "TaskManager")
    parser.add_argument("--checkpoint-ms", type=int, default=60_000, help="Flink's checkpoint interval")
    return parser


def flink_options(args: argparse.Namespace) -> PipelineOptions:
    """The pipeline options of the job on ``args.flink_master``."""
    return PipelineOptions(["--runner=FlinkRunner", f"--flink_master={args.flink_master}", "--streaming",
                            f"--checkpointing_interval={args.checkpoint_ms}", "--environment_type=EXTERNAL",
                            f"--environment_config={args.worker_pool}", f"--job_name=tokmaint-{args.lineage}"])


def main(argv: list[str] | None = None) -> None:
    import apache_beam as beam
    from apache_beam.io.kafka import ReadFromKafka

    from pipeline.beam_statistics import StatisticsSink, streaming_statistics
    from registry.client import RegistryClient
    from schemas.document import RecordError, decode_document

    args = build_parser().parse_args(argv)
    with RegistryClient(args.registry) as registry:
        tokenizer = registry.tokenizer(args.lineage)
    stream = StreamSettings(step_docs=args.step_docs, horizon_docs=64 * args.step_docs,
                            interval_docs=16 * args.step_docs, warmup_docs=16 * args.step_docs)
    sink = StatisticsSink(redis_url=args.redis, registry_url=args.registry, lineage=args.lineage, stream=stream)

    def id_ts_and_text(record):
        try:
            doc = decode_document(record[1])
        except RecordError:
            return
        yield doc.id, doc.ts.timestamp(), doc.text

    with beam.Pipeline(options=flink_options(args)) as p:
        docs = (p | ReadFromKafka(consumer_config={"bootstrap.servers": args.bootstrap}, topics=[args.topic])
                  | beam.FlatMap(id_ts_and_text))
        streaming_statistics(docs, sink, step_seconds=args.step_seconds, tokenizer=tokenizer)


if __name__ == "__main__":
    main()
