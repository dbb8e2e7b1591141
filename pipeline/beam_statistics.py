"""The streaming Beam variant end to end: documents → fixed event-time windows (the time steps) →
word counts (``beam_counting``) → the lineage's statistics in Redis, with Ted-Tok revisions
published to the registry, as a portable runner (Flink, Dataflow) runs it over Kafka.

A window is a step, as with ``tokmaint pipeline run --step-seconds`` (a window with no documents
makes no step). The windows' word counts go into the global window, keyed by lineage, to one
stateful ``_WriteSteps``: it keeps them until the watermark passes them (Beam may hand windows
over in any order) and then writes them in event-time order, each one step: its words counted
into tokens and within-word pairs with the lineage's current version (``StepCounter``, the
job's numbers exactly), one atomic write with the window's end as the step's position, a
revision when due, and before each step the registry's latest version adopted if someone else
published it. A runner that replays windows after a failure (Flink restores its checkpoint) finds
them written already: a window that ends no later than the last one written is skipped.

A producer that sends a document again (after a timeout, say) is counted once: documents are
keyed by id and Beam's ``DeduplicatePerKey`` drops an id seen within ``dedupe_steps`` windows of
event time, as the job's ``--dedupe-steps`` does.

Neighbour pairs (LiteToken's) need the documents' word order, which word counts drop: this
variant keeps Ted-Tok's statistics only, and ``tokmaint residues-job`` needs the job's.

    with beam.Pipeline(options=options) as p:
        streaming_statistics(p | ReadFromKafka(...) | beam.Map(to_id_ts_and_text), sink, step_seconds=60)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.coders import PickleCoder
from apache_beam.transforms.deduplicate import DeduplicatePerKey
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindows, TimestampedValue
from apache_beam.utils.timestamp import Duration

from pipeline.beam_counting import streaming_word_counts
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.evolve import StreamSettings

WINDOW = -1  # the "partition" under which a step's position, its window's end (ms), is kept


@dataclass(frozen=True)
class StatisticsSink:
    """Where the statistics go: Redis, the registry (its write token from
    ``TOKMAINT_REGISTRY_TOKEN`` on the workers) and the lineage, with the stream's settings."""

    redis_url: str
    registry_url: str
    lineage: str
    stream: StreamSettings


class _WriteSteps(beam.DoFn):
    """``(lineage, (window start s, window end s, Counter of words))`` → steps in Redis, in
    event-time order once the watermark has passed them."""

    WINDOWS = BagStateSpec("windows", PickleCoder())
    FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)

    def __init__(self, sink: StatisticsSink) -> None:
        self.sink = sink

    def setup(self) -> None:
        from pipeline.lineage_statistics import LineageStatistics
        from pipeline.parts import connect_redis
        from registry.client import RegistryClient

        self.registry = RegistryClient(self.sink.registry_url)
        self.stats = LineageStatistics(stream=self.sink.stream, redis_client=connect_redis(self.sink.redis_url),
                                       registry=self.registry, lineage=self.sink.lineage)

    def teardown(self) -> None:
        self.stats.close()
        self.registry.close()

    def process(self, element: tuple[str, tuple[float, float, Counter]], timestamp=beam.DoFn.TimestampParam,
                windows=beam.DoFn.StateParam(WINDOWS), flush=beam.DoFn.TimerParam(FLUSH)) -> Iterable[Any]:
        windows.add(element[1])
        flush.set(timestamp)  # the window's end: every window before it has come once the watermark passes it
        return ()

    @on_timer(FLUSH)
    def write(self, windows=beam.DoFn.StateParam(WINDOWS)) -> Iterable[Any]:
        ready = sorted(windows.read(), key=lambda w: w[0])
        windows.clear()
        for _, end, words in ready:
            self._step(round(end * 1000), words)
        return ()

    def _step(self, end_ms: int, words: Counter) -> None:
        stats = self.stats
        if stats.store.meta()["offsets"].get(WINDOW, -1) >= end_ms:  # a replay: written already
            return
        if stats.outdated():
            stats.follow()
        counter = stats.tedtok.counter
        counts = counter.count_words(counter.words.ids(list(words)), np.fromiter(words.values(), np.float64,
                                                                                    len(words)))
        stats.observe(counts, offsets={WINDOW: end_ms})


def streaming_statistics(documents: beam.PCollection, sink: StatisticsSink, *, step_seconds: float,
                         tokenizer: BPETokenizer, dedupe_steps: int = 100) -> beam.PCollection:
    """A stream of ``(id, ts seconds, text)`` documents into the lineage's statistics, a step a
    window of ``step_seconds``; ``tokenizer`` pre-tokenises (any version of the lineage: the
    pre-tokenizer is the same in all). An id seen within ``dedupe_steps`` windows is a resend,
    dropped (0: keep every document)."""
    if dedupe_steps:
        documents = (documents
                     | "ById" >> beam.Map(lambda doc: TimestampedValue((doc[0], doc[1:]), doc[1]))
                     | "SkipResends" >> DeduplicatePerKey(event_time_duration=Duration(dedupe_steps * step_seconds))
                     | "TsAndText" >> beam.Values())
    else:
        documents = documents | "TsAndText" >> beam.Map(lambda doc: doc[1:])
    return (streaming_word_counts(documents, tokenizer, step_seconds=step_seconds)
            | "WithEnd" >> beam.Map(lambda counted: (counted[0], counted[0] + step_seconds, counted[1]))
            | "AllWindows" >> beam.WindowInto(GlobalWindows())
            | "ByLineage" >> beam.Map(lambda window: (sink.lineage, window))
            | "WriteSteps" >> beam.ParDo(_WriteSteps(sink)))
