"""A step's counting in a process of its own, so that the job reads and decodes the next step
on one core while this one is counted on the other.

The process keeps a ``StepCounter`` of its own (its word cache lives there); the job hands it
the texts of a step and the version to count them with, and gets the step's ``StepCounts``
back: the same numbers as counting in the job's own process (the counts are by token id, and
a version's ids are the same everywhere). The tokenizer goes down the pipe only when it
changes. The process stops with the job, and by itself when the job's process dies (SIGKILL).

    with CountingProcess() as counting:
        counts = counting.submit(texts, tokenizer).result()
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import StepCounter, StepCounts

_counter: StepCounter | None = None  # the worker process's own (set by _count)
_sha256: str | None = None  # the version it counts with


def _exit_with(parent: int) -> None:
    """In the worker: exit once the job's process is gone (it cannot tell us when killed)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="tokmaint-counting-orphan-watch", daemon=True).start()


def _count(texts: list[str], sha256: str, tokenizer_json: str | None) -> StepCounts:
    """In the worker: count ``texts`` with version ``sha256`` (its JSON when it is new here)."""
    _use(sha256, tokenizer_json)
    return _counter.count_texts(texts, neighbours=True)


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


class CountingProcess:
    """One worker process that counts steps in the order they are submitted."""

    def __init__(self) -> None:
        # spawn, not fork: the job has threads (Kafka, the Redis writer, the tokenizers pool).
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_exit_with, initargs=(os.getpid(),))
        self._sent: str | None = None  # the sha256 of the tokenizer the worker was last sent
        self._pool.submit(os.getpid).result()  # started now: its imports are no step's time

    def load(self, tokenizer: BPETokenizer) -> None:
        """Have the worker load ``tokenizer`` now (at a job's start: no step's time), as the
        next :meth:`submit` with it would."""
        sha256 = tokenizer.sha256
        if sha256 != self._sent:
            self._pool.submit(_use, sha256, tokenizer.to_json()).result()
            self._sent = sha256

    def submit(self, texts: Sequence[str], tokenizer: BPETokenizer) -> Future[StepCounts]:
        """Count ``texts`` with ``tokenizer`` (tokens, within-word pairs and neighbours)."""
        sha256 = tokenizer.sha256
        payload = None if sha256 == self._sent else tokenizer.to_json()
        self._sent = sha256
        return self._pool.submit(_count, list(texts), sha256, payload)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "CountingProcess":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
