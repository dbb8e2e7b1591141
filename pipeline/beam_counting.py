"""The counting as Apache Beam transforms: the parallel part of a time step (pre-tokenising
documents and counting their words in bundles, then combining), for the batch job and for a
streaming pipeline whose fixed windows are the time steps.

``CountWords`` turns ``(key, text)`` into ``(key, Counter of words)``, a key being a step (batch)
or anything within a window (streaming). The words are what the core's ``StepCounter`` turns
into token and pair counts, so the numbers equal the offline path exactly. Locally the batch
pipeline runs on ``FnApiRunner`` (named: the default runner would try to download Prism) and the
streaming one on the direct runner with ``TestStream``; on Flink or Dataflow
``beam_statistics.streaming_statistics`` runs ``streaming_word_counts`` over Beam's
``ReadFromKafka`` and writes the windows to Redis as steps (see the README).

    counts = count_step_words({1: texts_of_step_1, 2: texts_of_step_2}, tokenizer)
    counts[1].most_common(3)
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.window import FixedWindows
from apache_beam.utils.windowed_value import WindowedValue

from tokenizer_service.bpe import BPETokenizer


class _WordsInBundle(beam.DoFn):
    """Pre-tokenises documents and counts their words per key and window, one Counter each a
    bundle: the texts are gathered and counted together at the bundle's end (the core's word
    counting maps each distinct word once per call, so one call a bundle, not one a document)."""

    def __init__(self, tokenizer_json: str) -> None:
        self.tokenizer_json = tokenizer_json

    def setup(self) -> None:
        self.tokenizer = BPETokenizer.from_json(self.tokenizer_json)

    def start_bundle(self) -> None:
        self.texts: dict[tuple[Any, Any], list[str]] = defaultdict(list)

    def process(self, element: tuple[Any, str], window=beam.DoFn.WindowParam) -> Iterable[Any]:
        key, text = element
        self.texts[key, window].append(text)
        return ()

    def finish_bundle(self) -> Iterable[WindowedValue]:
        for (key, window), texts in self.texts.items():
            yield WindowedValue((key, self.tokenizer.word_counts(texts)), window.max_timestamp(), [window])


class _MergeCounters(beam.CombineFn):
    def create_accumulator(self) -> Counter:
        return Counter()

    def add_input(self, accumulator: Counter, counts: Counter) -> Counter:
        accumulator.update(counts)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Counter]) -> Counter:
        merged: Counter = Counter()
        for counts in accumulators:
            merged.update(counts)
        return merged

    def extract_output(self, accumulator: Counter) -> Counter:
        return accumulator


class CountWords(beam.PTransform):
    """``(key, text)`` → ``(key, Counter of words)``: pre-tokenised with ``tokenizer``, counted per
    bundle, combined per key (and window)."""

    def __init__(self, tokenizer: BPETokenizer) -> None:
        super().__init__()
        self.tokenizer_json = tokenizer.to_json()

    def expand(self, documents: beam.PCollection) -> beam.PCollection:
        return documents | beam.ParDo(_WordsInBundle(self.tokenizer_json)) | beam.CombinePerKey(_MergeCounters())


class _CountShard(beam.DoFn):
    """A shard file (a JSON list of one step's texts) into ``(step, Counter of words)``."""

    def __init__(self, tokenizer_json: str) -> None:
        self.tokenizer_json = tokenizer_json

    def setup(self) -> None:
        self.tokenizer = BPETokenizer.from_json(self.tokenizer_json)

    def process(self, element: tuple[int, str]) -> Iterable[tuple[int, Counter]]:
        step, path = element
        yield step, self.tokenizer.word_counts(json.loads(Path(path).read_text(encoding="utf-8")))


class _WriteJson(beam.DoFn):
    """One JSON file per ``(step, Counter)`` into a folder (the driver reads them back)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def process(self, element: tuple[int, Counter]) -> Iterable[Any]:
        step, counts = element
        Path(self.folder, f"{step}.json").write_text(json.dumps(counts, ensure_ascii=False), encoding="utf-8")
        return ()


def count_step_words(steps: Mapping[int, Sequence[str]], tokenizer: BPETokenizer, *, shards: int = 2,
                     options: PipelineOptions | None = None) -> dict[int, Counter]:
    """The words of each step's documents, counted by a batch Beam pipeline on ``FnApiRunner``.

    Beam is handed shard *paths*: each step's texts are written to ``shards`` files first, since
    whatever ``beam.Create`` is handed is pickled and bz2-compressed (measured here: 13 MB of
    texts as elements took 7 s to count, as shard paths 2.3 s, a plain loop 1.2 s). ``options``
    may ask for more workers (``direct_num_workers``, ``direct_running_mode``)."""
    with tempfile.TemporaryDirectory(prefix="tokmaint-beam-") as folder:
        paths = []
        for step, texts in steps.items():
            for k in range(min(shards, len(texts))):
                path = Path(folder, f"shard-{step}-{k}.json")
                path.write_text(json.dumps(list(texts[k::shards]), ensure_ascii=False), encoding="utf-8")
                paths.append((step, str(path)))
        with beam.Pipeline(runner=FnApiRunner(), options=options or PipelineOptions()) as pipeline:
            (pipeline
             | beam.Create(paths)
             | beam.Reshuffle()  # the shards spread over the workers
             | beam.ParDo(_CountShard(tokenizer.to_json()))
             | beam.CombinePerKey(_MergeCounters())
             | beam.ParDo(_WriteJson(folder)))
        return {step: Counter(json.loads(Path(folder, f"{step}.json").read_text(encoding="utf-8")))
                if Path(folder, f"{step}.json").exists() else Counter() for step in steps}


def streaming_word_counts(documents: beam.PCollection, tokenizer: BPETokenizer, *, step_seconds: float
                          ) -> beam.PCollection:
    """A stream of ``(ts seconds, text)`` documents into ``(window start, Counter)`` a fixed window
    (a time step of ``step_seconds`` event time), as a portable runner runs it over Kafka."""
    return (documents
            | beam.Map(lambda item: beam.window.TimestampedValue(("step", item[1]), item[0]))
            | beam.WindowInto(FixedWindows(step_seconds))
            | CountWords(tokenizer)
            | beam.ParDo(_WindowStart()))


class _WindowStart(beam.DoFn):
    def process(self, element: tuple[Any, Counter], window=beam.DoFn.WindowParam) -> Iterable[Any]:
        yield window.start.micros / 1e6, element[1]
