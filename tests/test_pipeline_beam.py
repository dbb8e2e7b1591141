"""The counting as Beam transforms: the batch pipeline (FnApiRunner) counts each step's words as
the core does, so the token and pair counts equal the offline path exactly; the streaming variant
on TestStream (fixed event-time windows = time steps) gives the same counts as the batch."""

import json
from collections import Counter
from pathlib import Path

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing import test_stream
from apache_beam.transforms.window import TimestampedValue

from pipeline.beam_counting import count_step_words, streaming_word_counts
from tokenizer_service.corpus import batches, read_corpus
from tokenizer_service.counting import StepCounter


def test_batch_counts_equal_the_core_counts(drifting_corpus, byte_tokenizer):
    docs = read_corpus(drifting_corpus).documents
    steps = {k + 1: texts for k, texts in enumerate(batches(docs, 64))}
    counted = count_step_words(steps, byte_tokenizer)
    assert counted == {step: byte_tokenizer.word_counts(texts) for step, texts in steps.items()}
    counter = StepCounter(byte_tokenizer)
    for step, texts in steps.items():
        words = counted[step]
        via_beam = counter.count_words(counter.words.ids(list(words)), np.array(list(words.values()), np.int64))
        direct = counter.count_texts(texts)
        for field in ("token_ids", "token_counts", "pair_keys", "pair_counts"):
            np.testing.assert_array_equal(getattr(via_beam, field), getattr(direct, field))


class _Collect(beam.DoFn):
    def __init__(self, folder: str) -> None:
        self.folder = folder

    def process(self, element):
        start, counts = element
        Path(self.folder, f"{start:.0f}.json").write_text(json.dumps(counts))


def test_streaming_windows_give_the_batch_counts(drifting_corpus, byte_tokenizer, tmp_path):
    docs = read_corpus(drifting_corpus).documents  # one document a second, 600 seconds
    stream = test_stream.TestStream()  # (imported by module: pytest would collect a Test* class)
    for doc in docs:
        stream = stream.add_elements([TimestampedValue((doc.ts.timestamp(), doc.text), doc.ts.timestamp())])
    stream = stream.advance_watermark_to_infinity()
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as pipeline:
        streaming_word_counts(pipeline | stream, byte_tokenizer, step_seconds=60) | beam.ParDo(_Collect(str(tmp_path)))
    windows: dict[float, list[str]] = {}
    for doc in docs:
        start = doc.ts.timestamp() // 60 * 60
        windows.setdefault(start, []).append(doc.text)
    got = {float(p.stem): Counter(json.loads(p.read_text())) for p in tmp_path.glob("*.json")}
    assert got == {start: byte_tokenizer.word_counts(texts) for start, texts in windows.items()}
    assert len(got) == 10
