"""The counting process: the job's counts made in a worker process, the same as the job's own."""

import numpy as np
import pytest

from pipeline.counting_process import CountingProcess
from tests.conftest import sentences
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import StepCounter, StepCounts


def _same(a: StepCounts, b: StepCounts) -> bool:
    return (a.n_bytes, a.n_tokens) == (b.n_bytes, b.n_tokens) and all(
        np.array_equal(getattr(a, f), getattr(b, f))
        for f in ("token_ids", "token_counts", "pair_keys", "pair_counts", "neighbour_keys", "neighbour_counts")
    )


def test_counts_equal_the_jobs_own_in_order_across_versions(byte_tokenizer, corpus):
    other = BPETokenizer.train(corpus[::2], vocab_size=300)
    steps = [(sentences(50, seed=k), byte_tokenizer if k % 3 else other) for k in range(7)]
    with CountingProcess() as counting:
        futures = [counting.submit(texts, tokenizer) for texts, tokenizer in steps]  # all queued at once
        counted = [f.result(timeout=60) for f in futures]
    for (texts, tokenizer), counts in zip(steps, counted):
        assert _same(counts, StepCounter(tokenizer).count_texts(texts, neighbours=True))


def test_a_step_prepared_before_its_version_counts_as_one_sent_with_it():
    """The step after a revision: split into words while the version is planned, the version
    loaded without waiting, then counted: the counts of the step sent whole with it. A prepare
    that fails is raised by the count that needs it; a count of nothing prepared fails."""
    from tests.conftest import NEW_WORDS, tedtok_lineage

    initial, revisions = tedtok_lineage(seed=3, steps=14)
    texts = sentences(80, seed=9) + sentences(80, seed=10, words=NEW_WORDS + ["stream", "token"])
    with CountingProcess() as counting:
        counting.load(initial)
        counting.submit(texts[:40], initial).result(timeout=60)
        for revision in revisions:
            counting.prepare(texts)
            counting.load(revision.tokenizer, wait=False)
            assert _same(
                counting.submit(None, revision.tokenizer).result(timeout=60),
                StepCounter(revision.tokenizer).count_texts(texts, neighbours=True),
            )
        with pytest.raises(RuntimeError, match="no texts prepared"):
            counting.submit(None, initial).result(timeout=60)
        counting.prepare([None])  # no text: splitting it fails in the worker
        with pytest.raises(AttributeError):
            counting.submit(None, initial).result(timeout=60)
        assert _same(
            counting.submit(texts, initial).result(timeout=60), StepCounter(initial).count_texts(texts, neighbours=True)
        )


def test_an_error_in_the_worker_is_raised_by_its_future_and_the_worker_goes_on(byte_tokenizer):
    with CountingProcess() as counting:
        counting.submit(["a"], byte_tokenizer).result(timeout=60)
        other = BPETokenizer.train(["x y"], vocab_size=258)
        counting._sent = other.sha256  # as if the worker had been sent a version it never was
        with pytest.raises(RuntimeError, match="has no tokenizer"):
            counting.submit(["a b"], other).result(timeout=60)
        assert _same(
            counting.submit(["a b"], byte_tokenizer).result(timeout=60),
            StepCounter(byte_tokenizer).count_texts(["a b"], neighbours=True),
        )
