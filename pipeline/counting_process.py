"""A step's counting in a process of its own, so that the job reads and decodes the next step
on one core while this one is counted on the other.

The process keeps a ``StepCounter`` of its own (its word cache lives there); the job hands it
the texts of a step and the version to count them with, and gets the step's ``StepCounts``
back: the same numbers as counting in the job's own process (the counts are by token id, and
a version's ids are the same everywhere). The tokenizer goes down the pipe only when it
changes. The process stops with the job, and by itself when the job's process dies (SIGKILL).

    with CountingProcess() as counting:
        counts = counting.submit(texts, tokenizer).result()

A step whose version is still being made (the step after a revision) is handed over first to be
split into words (``prepare``: the longest part of counting, the same under every version of a
lineage), and counted once the version is there (``submit(None, version)``).

The process is a ``tokenizer_service.ordered_worker.OrderedWorker``: it answers in order, over
pipes wide enough for a step, and a dead one fails what is pending with ``WorkerDied``.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import StepCounter, StepCounts
from tokenizer_service.ordered_worker import OrderedWorker

_counter: StepCounter | None = None  # the worker process's own (set by _use)
_sha256: str | None = None  # the version it counts with
# Texts split into words ahead, by _prepare (or why that failed), until the next _count of None.
_prepared: tuple[list[str], tuple[Any, Any]] | Exception | None = None


def _count(texts: list[str] | None, sha256: str, tokenizer_json: str | None) -> StepCounts:
    """In the worker: count ``texts`` (None: those prepared last) with version ``sha256`` (its
    JSON when it is new here)."""
    global _prepared
    prepared, _prepared = (None, _prepared) if texts is not None else (_prepared, None)
    _use(sha256, tokenizer_json)
    if texts is not None:
        return _counter.count_texts(texts, neighbours=True)
    if prepared is None:
        raise RuntimeError("the counting process has no texts prepared")
    if isinstance(prepared, Exception):
        raise prepared
    texts, words = prepared
    return _counter.count_texts(texts, neighbours=True, words=words)


def _prepare(texts: list[str]) -> None:
    """In the worker: split ``texts`` into words now, for the next ``_count`` of None."""
    global _prepared
    try:
        _prepared = (texts, _counter.word_sequences(texts))
    except Exception as exc:  # raised again by the count that needs them
        _prepared = exc
        raise


def _use(sha256: str, tokenizer_json: str | None) -> None:
    """In the worker: count with version ``sha256`` from now on (its JSON when it is new here)."""
    global _counter, _sha256
    if sha256 != _sha256:
        if tokenizer_json is None:
            raise RuntimeError(f"the counting process has no tokenizer {sha256[:12]}")
        tokenizer = BPETokenizer.from_json(tokenizer_json)
        if _counter is None:
            _counter = StepCounter(tokenizer)
        else:  # word ids and the word texts' cache stay; encodings are made again lazily
            _counter.set_tokenizer(tokenizer)
        _sha256 = sha256
        # What lives now (modules, the version, the word cache) stays: the collector's full
        # passes skip it. One over all of it took ~80 ms, in the step after a revision.
        gc.freeze()


class CountingProcess(AbstractContextManager["CountingProcess"]):
    """One worker process that counts steps in the order they are submitted."""

    def __init__(self) -> None:
        self._worker = OrderedWorker(name="tokmaint-counting")
        self._sent: str | None = None  # the sha256 of the tokenizer the worker was last sent
        self._worker.call(os.getpid).result()  # started now: its imports are not a step's time

    def load(self, tokenizer: BPETokenizer, *, wait: bool = True) -> None:
        """Have the worker load ``tokenizer`` once it is done with what it was sent, as the next
        :meth:`submit` with it would: at a job's start (no step's time), or while the step
        that counts with it waits for it to be planned (without ``wait``: the submit that
        counts with it fails if this did)."""
        sha256 = tokenizer.sha256
        if sha256 != self._sent:
            loaded = self._worker.call(_use, sha256, tokenizer.to_json())
            self._sent = sha256
            if wait:
                loaded.result()

    def prepare(self, texts: Sequence[str]) -> None:
        """Have the worker split ``texts`` into words once it is done with what it was sent,
        for the next :meth:`submit` of None (whose future carries any error of this)."""
        self._worker.call(_prepare, list(texts))

    def submit(self, texts: Sequence[str] | None, tokenizer: BPETokenizer) -> Future[StepCounts]:
        """Count ``texts`` (None: those of the last :meth:`prepare`) with ``tokenizer``, of the
        same lineage as the version they were prepared with (tokens, within-word pairs and
        neighbours); raises ``WorkerDied`` when the worker is gone, as does the future then."""
        sha256 = tokenizer.sha256
        payload = None if sha256 == self._sent else tokenizer.to_json()
        self._sent = sha256
        return self._worker.call(_count, None if texts is None else list(texts), sha256, payload)

    def close(self) -> None:
        """Stop the worker once it has answered what it was sent."""
        self._worker.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
