"""The pipeline job's Prometheus metrics, served by ``tokmaint pipeline run --metrics-port``.

One registry per job (several jobs may share a process in tests), every series labelled by
lineage: steps, documents, bytes, dead letters, revisions by outcome, consumer lag (documents
between the last step's end and the topic's high watermarks), the stream's bytes/token at the
last step written, the version counted with, the time per step and per revision, and the
seconds the job was without the registry (``tokmaint_registry_away_seconds``, the trainer's
name for it too: ``trainer.metrics``).

>>> metrics = PipelineMetrics.create("news")
>>> metrics.step(documents=3, megabytes=0.001, dead=1, seconds=0.2)
>>> metrics.registry.get_sample_value("tokmaint_pipeline_documents_total", {"lineage": "news"})
3.0
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


@dataclass
class PipelineMetrics:
    lineage: str
    registry: CollectorRegistry
    steps: Counter
    documents: Counter
    megabytes: Counter
    dead_letters: Counter
    revisions: Counter
    consumer_lag: Gauge
    bytes_per_token: Gauge
    version: Gauge
    step_seconds: Histogram
    revision_seconds: Histogram
    redis_down: Gauge
    restarts: Counter
    registry_away: Gauge

    @classmethod
    def create(cls, lineage: str) -> "PipelineMetrics":
        reg = CollectorRegistry()
        label = ["lineage"]
        return cls(
            lineage=lineage,
            registry=reg,
            steps=Counter("tokmaint_pipeline_steps_total", "time steps counted", label, registry=reg),
            documents=Counter("tokmaint_pipeline_documents_total", "documents counted", label, registry=reg),
            megabytes=Counter("tokmaint_pipeline_megabytes_total", "megabytes of text counted", label, registry=reg),
            dead_letters=Counter(
                "tokmaint_pipeline_dead_letters_total", "records sent to the dead-letter topic", label, registry=reg
            ),
            revisions=Counter(
                "tokmaint_pipeline_revisions_total",
                "revisions committed, by outcome",
                [*label, "outcome"],
                registry=reg,
            ),
            consumer_lag=Gauge(
                "tokmaint_pipeline_consumer_lag",
                "records between the last step and the topic's end",
                label,
                registry=reg,
            ),
            bytes_per_token=Gauge(
                "tokmaint_pipeline_bytes_per_token",
                "the stream's bytes/token at the last step written",
                label,
                registry=reg,
            ),
            version=Gauge("tokmaint_pipeline_version", "the tokenizer version counted with", label, registry=reg),
            step_seconds=Histogram(
                "tokmaint_pipeline_step_seconds",
                "wall time per step",
                label,
                registry=reg,
                buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            ),
            revision_seconds=Histogram(
                "tokmaint_pipeline_revision_seconds",
                "time to validate, write and publish a revision",
                label,
                registry=reg,
                buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            ),
            redis_down=Gauge(
                "tokmaint_pipeline_redis_down", "1 while the job waits for Redis to answer again", label, registry=reg
            ),
            restarts=Counter(
                "tokmaint_pipeline_restarts_total",
                "times the job started again from its statistics after Redis went away",
                label,
                registry=reg,
            ),
            registry_away=Gauge(
                "tokmaint_registry_away_seconds",
                "seconds without the registry: its watch away, or waited for to start again",
                label,
                registry=reg,
            ),
        )

    def step(self, *, documents: int, megabytes: float, dead: int, seconds: float) -> None:
        self.steps.labels(self.lineage).inc()
        self.documents.labels(self.lineage).inc(documents)
        self.megabytes.labels(self.lineage).inc(megabytes)
        self.dead_letters.labels(self.lineage).inc(dead)
        self.step_seconds.labels(self.lineage).observe(seconds)

    def serve(self, port: int, *, host: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` on ``port`` (:func:`serve`)."""
        serve(self.registry, port, host=host)


def serve(registry: CollectorRegistry, port: int, *, host: str = "0.0.0.0") -> None:
    """Serve ``registry``'s metrics at ``/metrics`` on ``port`` from a thread of its own
    (prometheus-client's server): the pipeline's and the trainer's (``trainer.metrics``)."""
    start_http_server(port, addr=host, registry=registry)
