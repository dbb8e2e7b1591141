"""The counting pool: a step shared between the counting process and the caller, the same counts
at any share, and the share moving with who waits."""

import os
import signal

import numpy as np
import pytest

from pipeline import counting_pool
from pipeline.counting_pool import CountingPool
from tests.conftest import sentences
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import StepCounter, StepCounts
from tokenizer_service.ordered_worker import WorkerDied


def _same(a: StepCounts, b: StepCounts) -> bool:
    return (a.n_bytes, a.n_tokens) == (b.n_bytes, b.n_tokens) and all(
        np.array_equal(getattr(a, f), getattr(b, f))
        for f in ("token_ids", "token_counts", "pair_keys", "pair_counts", "neighbour_keys", "neighbour_counts")
    )


@pytest.mark.parametrize("share", [0.0, 0.3, 0.5])
def test_the_counts_are_the_same_at_any_share(byte_tokenizer, share):
    texts = sentences(120, seed=4)
    pool = CountingPool(own=StepCounter(byte_tokenizer))
    try:
        pool.own_share = share
        pending = pool.submit(texts, byte_tokenizer)
        assert (pending.own is None) == (share == 0.0)  # a share of none: the process counts it all
        assert _same(pool.counts(pending), StepCounter(byte_tokenizer).count_texts(texts, neighbours=True))
    finally:
        pool.close()


def test_prepared_texts_count_as_texts_submitted_whole(corpus):
    """The step after a revision: the process splits its share into words before the version
    exists; counted once it does, with the caller's share beside it."""
    first = BPETokenizer.train(corpus, vocab_size=280)
    revised = BPETokenizer.train(corpus, vocab_size=300)
    texts = sentences(90, seed=5)
    own = StepCounter(first)
    pool = CountingPool(own=own)
    try:
        pool.load(first)
        pool.own_share = 0.4
        prepared = pool.prepare(texts)
        assert prepared.cut == 54 and prepared.texts == texts
        own.set_tokenizer(revised)  # the caller's counter moves with its version, as Ted-Tok's does
        pool.load(revised, wait=False)
        counts = pool.counts(pool.submit(None, revised, prepared=prepared))
        assert _same(counts, StepCounter(revised).count_texts(texts, neighbours=True))
    finally:
        pool.close()


def test_the_callers_share_grows_while_it_waits_and_shrinks_while_it_does_not(byte_tokenizer, monkeypatch):
    pool = CountingPool(own=StepCounter(byte_tokenizer))
    try:

        def step(clock_step: float) -> None:
            pending = pool.submit(["a b"] * 10, byte_tokenizer)
            pending.future.result(timeout=60)
            monkeypatch.setattr(counting_pool.time, "perf_counter", _clock(step=clock_step))
            pool.counts(pending)
            monkeypatch.undo()

        step(0.0)  # answered at once: no wait, and never below none
        assert pool.own_share == 0.0
        for _ in range(40):  # every wait looks long: the caller takes more, up to the most
            step(1.0)
        assert pool.own_share == counting_pool.SHARE_MAX
        step(0.0)
        assert pool.own_share == pytest.approx(counting_pool.SHARE_MAX - counting_pool.SHARE_STEP)
    finally:
        pool.close()


def _clock(*, step: float):
    """A perf_counter that moves ``step`` seconds a call."""
    now = [0.0]

    def perf_counter() -> float:
        now[0] += step
        return now[0]

    return perf_counter


def test_a_dead_process_is_raised_by_the_counts_and_by_the_next_submit(byte_tokenizer):
    pool = CountingPool(own=StepCounter(byte_tokenizer))
    try:
        pool.counts(pool.submit(["a"], byte_tokenizer))
        os.kill(pool.process._worker.pid, signal.SIGKILL)
        with pytest.raises(WorkerDied):
            pool.counts(pool.submit(["a b"] * 50, byte_tokenizer))
        with pytest.raises(WorkerDied):
            pool.submit(["a"], byte_tokenizer)
    finally:
        pool.close()
