"""The trainer's Prometheus metrics, served by ``tokmaint trainer run --metrics-port``
(``pipeline.metrics.serve``, the pipeline job's server): the optimizer steps the model has
taken, the version it is on and the seconds the trainer was without the registry (waiting for
it to start, or training on while it was away: ``tokmaint_registry_away_seconds``, as the
pipeline's ``/metrics`` names it), each labelled by lineage and read when scraped, so that the
training loop does nothing for them.

>>> from registry.client import Outages
>>> metrics = TrainerMetrics.create("news", Outages("http://127.0.0.1:8000", "news"))
>>> metrics.registry.get_sample_value("tokmaint_registry_away_seconds", {"lineage": "news"})
0.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge

from pipeline.metrics import serve
from registry.client import Outages

if TYPE_CHECKING:
    from trainer.loop import Trainer


@dataclass
class TrainerMetrics:
    lineage: str
    registry: CollectorRegistry
    steps: Gauge
    version: Gauge
    registry_away: Gauge

    @classmethod
    def create(cls, lineage: str, outages: Outages) -> TrainerMetrics:
        """The metrics of a trainer of ``lineage`` whose registry's outages ``outages`` counts:
        the seconds without the registry from now on (the trainer's first request), the steps and
        the version once :meth:`follow` has the trainer."""
        reg = CollectorRegistry()
        label = ["lineage"]
        metrics = cls(
            lineage=lineage,
            registry=reg,
            steps=Gauge(
                "tokmaint_trainer_steps",
                "optimizer steps the model has taken (a resumed run's too)",
                label,
                registry=reg,
            ),
            version=Gauge("tokmaint_trainer_version", "the tokenizer version the model is on", label, registry=reg),
            registry_away=Gauge(
                "tokmaint_registry_away_seconds",
                "seconds without the registry: waited for to start, or away while the trainer trained on",
                label,
                registry=reg,
            ),
        )
        metrics.registry_away.labels(lineage).set_function(lambda: outages.seconds)
        return metrics

    def follow(self, trainer: Trainer) -> None:
        """Read the steps and the version from ``trainer`` at every scrape from now on."""
        self.steps.labels(self.lineage).set_function(lambda: trainer.step)
        self.version.labels(self.lineage).set_function(lambda: trainer.version)

    def serve(self, port: int, *, host: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` on ``port`` (``pipeline.metrics.serve``)."""
        serve(self.registry, port, host=host)
