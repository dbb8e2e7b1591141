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


def test_streaming_statistics_equal_the_offline_reference_and_a_replay_changes_nothing(
        drifting_corpus, redis_url, tmp_path, monkeypatch, capsys):
    """The streaming variant into Redis (a window a step, written in event-time order, revisions
    published, resent documents counted once) gives the statistics and versions of the offline
    Ted-Tok on the same windows; running it again over the same stream (a runner's replay)
    writes nothing."""
    import uuid

    import redis

    from pipeline.beam_statistics import StatisticsSink, streaming_statistics
    from pipeline.redis_store import RedisStatsStore
    from registry.client import RegistryClient
    from registry.local_server import start_server
    from tokenizer_service.bpe import BPETokenizer
    from tokenizer_service.evolve import StreamSettings
    from tokenizer_service.stats_store import MemoryStatsStore
    from tokenizer_service.tedtok import TedTok
    from tokmaint.cli import main

    docs = read_corpus(drifting_corpus).documents  # one document a second, 600 seconds
    initial = BPETokenizer.train([d.text for d in docs[:200]], vocab_size=300)
    settings = StreamSettings(step_docs=60, horizon_docs=600, interval_docs=120, warmup_docs=120, batch_size=8,
                              id_price=0.0, base_token_cost=0.0)
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", "t" * 32)
    server, registry_url = start_server(tmp_path / "registry", env={"TOKMAINT_REGISTRY_TOKEN": "t" * 32})
    try:
        lineage = f"beam-{uuid.uuid4().hex[:8]}"
        RegistryClient(registry_url).create(lineage, initial.to_json())
        sink = StatisticsSink(redis_url=redis_url, registry_url=registry_url, lineage=lineage, stream=settings)
        def stream():
            stream = test_stream.TestStream()
            # Out of order across windows (written in order), and a producer's resends in and across windows.
            numbered = list(enumerate(docs))
            for k, doc in list(reversed(numbered[:130])) + numbered[130:300] + numbered[250:320] + numbered[300:]:
                ts = doc.ts.timestamp()
                stream = stream.add_elements([TimestampedValue((f"doc-{k}", ts, doc.text), ts)])
            return stream.advance_watermark_to_infinity()

        options = PipelineOptions()
        options.view_as(StandardOptions).streaming = True
        store = RedisStatsStore(redis.Redis.from_url(redis_url), lineage=lineage, alpha=settings.alpha)
        snapshots = []
        for _ in range(2):
            with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as pipeline:
                streaming_statistics(pipeline | stream(), sink, step_seconds=60, tokenizer=initial)
            keys, values = store.top_pairs(store.tracked_pairs)
            snapshots.append((store.meta(), store.token(np.arange(400)).tolist(), keys.tolist(), values.tolist()))
        versions = RegistryClient(registry_url).versions(lineage)["data"]
        assert main(["residues-job", "--redis", redis_url, "--registry", registry_url, "--lineage", lineage]) == 2
        assert "has no neighbour statistics" in capsys.readouterr().err
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert snapshots[0] == snapshots[1]  # the replay wrote nothing

    reference = TedTok(initial, config=settings.tedtok_config(), store=MemoryStatsStore(alpha=settings.alpha),
                       lineage=lineage)
    for k in range(10):
        reference.observe_texts([d.text for d in docs[60 * k:60 * (k + 1)]])
    assert reference.revisions
    assert [v["sha256"] for v in versions[1:]] == [r.tokenizer.sha256 for r in reference.revisions]
    meta, tokens, keys, values = snapshots[0]
    assert meta["step"] == 10 and meta["version"] == versions[-1]["number"]
    np.testing.assert_allclose(tokens, reference.store.token(np.arange(400)), rtol=1e-9, atol=1e-12)
    ref_keys, ref_values = reference.store.top_pairs(reference.store.tracked_pairs)
    assert keys == ref_keys.tolist()
    np.testing.assert_allclose(values, ref_values, rtol=1e-9)
