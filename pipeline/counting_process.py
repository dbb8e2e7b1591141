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

Why not ``ProcessPoolExecutor``: it hands each task to a feeder thread and takes each result
through a manager thread, and both wait for the GIL while the job counts and decodes; its
pipes hold 64 KiB, a step's counts ~400 KiB, so the process sat blocked mid-send until the job's
thread came round (13% of its time, measured). Here the job writes a task down the pipe
itself, a thread of its own only reads results, and both pipes are widened to hold a step.
"""

from __future__ import annotations

import fcntl
import gc
import multiprocessing
import os
import pickle
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.counting import StepCounter, StepCounts

PIPE_BYTES = 1 << 20  # each pipe's buffer (Linux's default limit for a process without privileges)

_counter: StepCounter | None = None  # the worker process's own (set by _use)
_sha256: str | None = None  # the version it counts with
# Texts split into words ahead, by _prepare (or why that failed), until the next _count of None.
_prepared: tuple[list[str], tuple[Any, Any]] | Exception | None = None


class CountingProcessDied(RuntimeError):
    """The counting process is gone (killed, out of memory): its pending counts never come."""


def _widen(connection: Connection) -> None:
    """Give the pipe under ``connection`` a buffer of ``PIPE_BYTES`` where the system allows
    (Linux; elsewhere, or over its limit, it keeps its own: slower, no less correct)."""
    try:
        fcntl.fcntl(connection.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (AttributeError, OSError):
        pass


def _serve(requests: Connection, results: Connection, parent: int) -> None:
    """The worker: answer each ``(function, args)`` in order with ``(True, result)`` or
    ``(False, exception)``, until ``None`` or the job's process is gone."""

    def watch() -> None:  # the job's process cannot tell us when it is killed
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="tokmaint-counting-orphan-watch", daemon=True).start()
    while True:
        try:
            task = requests.recv()
        except EOFError:  # the job's end of the pipe is closed: it is gone
            return
        if task is None:
            return
        function, args = task
        try:
            answer = (True, function(*args))
        except Exception as exc:
            answer = (False, exc)
        try:
            data = pickle.dumps(answer)
        except Exception as exc:  # an answer that does not pickle: its reason instead
            data = pickle.dumps((False, RuntimeError(f"the counting process's answer: {type(exc).__name__}: {exc}")))
        try:
            results.send_bytes(data)
        except OSError:  # the job is gone while this was counted
            return


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


class CountingProcess:
    """One worker process that counts steps in the order they are submitted."""

    def __init__(self) -> None:
        # spawn, not fork: the job has threads (Kafka, the Redis writer, the tokenizers pool).
        context = multiprocessing.get_context("spawn")
        theirs_requests, self._requests = context.Pipe(duplex=False)
        self._results, theirs_results = context.Pipe(duplex=False)
        for connection in (self._requests, self._results):
            _widen(connection)
        self._process = context.Process(target=_serve, args=(theirs_requests, theirs_results, os.getpid()),
                                        name="tokmaint-counting", daemon=True)
        self._process.start()
        theirs_requests.close()  # the worker's ends: its exit then reads as the end of the pipe here
        theirs_results.close()
        # One task down the pipe at a time, its future queued first; the reader takes only the
        # queue's lock, so that a send that waits for the worker never keeps it from results.
        self._sending, self._lock = threading.Lock(), threading.Lock()
        self._pending: deque[Future] = deque()
        self._dead: CountingProcessDied | None = None
        self._sent: str | None = None  # the sha256 of the tokenizer the worker was last sent
        threading.Thread(target=self._read, name="tokmaint-counting-results", daemon=True).start()
        self._call(os.getpid).result()  # started now: its imports are no step's time

    def _call(self, function: Callable[..., Any], *args: Any) -> Future:
        """Run ``function(*args)`` in the worker, after what was sent before."""
        future: Future = Future()
        with self._sending:
            with self._lock:
                if self._dead is not None:
                    raise self._dead
                self._pending.append(future)
            try:
                self._requests.send((function, args))
            except OSError:  # gone: the reader fails every pending future, this one with them
                pass
        return future

    def _read(self) -> None:
        """On a thread of its own: each answer to the oldest pending future; when the worker is
        gone, every pending one fails."""
        while True:
            try:
                data = self._results.recv_bytes()
            except (EOFError, OSError):
                break
            with self._lock:
                future = self._pending.popleft()
            try:
                ok, value = pickle.loads(data)
            except Exception as exc:  # an exception of the worker's that does not unpickle here
                ok, value = False, RuntimeError(f"the counting process's answer: {type(exc).__name__}: {exc}")
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
        self._results.close()
        self._process.join()
        with self._lock:
            code = self._process.exitcode
            self._dead = CountingProcessDied("the counting process exited" + (f" (code {code})" if code else ""))
            pending, self._pending = list(self._pending), deque()
        for future in pending:
            future.set_exception(self._dead)

    def load(self, tokenizer: BPETokenizer, *, wait: bool = True) -> None:
        """Have the worker load ``tokenizer`` once it is done with what it was sent, as the next
        :meth:`submit` with it would: at a job's start (no step's time), or while the step
        that counts with it waits for it to be planned (without ``wait``: the submit that
        counts with it fails if this did)."""
        sha256 = tokenizer.sha256
        if sha256 != self._sent:
            loaded = self._call(_use, sha256, tokenizer.to_json())
            self._sent = sha256
            if wait:
                loaded.result()

    def prepare(self, texts: Sequence[str]) -> None:
        """Have the worker split ``texts`` into words once it is done with what it was sent,
        for the next :meth:`submit` of None (whose future carries any error of this)."""
        self._call(_prepare, list(texts))

    def submit(self, texts: Sequence[str] | None, tokenizer: BPETokenizer) -> Future[StepCounts]:
        """Count ``texts`` (None: those of the last :meth:`prepare`) with ``tokenizer``, of the
        same lineage as the version they were prepared with (tokens, within-word pairs and
        neighbours); raises :class:`CountingProcessDied` when the worker is gone, as does the
        future then."""
        sha256 = tokenizer.sha256
        payload = None if sha256 == self._sent else tokenizer.to_json()
        self._sent = sha256
        return self._call(_count, None if texts is None else list(texts), sha256, payload)

    def close(self) -> None:
        """Stop the worker once it has answered what it was sent."""
        with self._sending:
            try:
                self._requests.send(None)
            except OSError:
                pass
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._requests.close()

    def __enter__(self) -> "CountingProcess":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
