"""One spawned process that runs the calls sent to it in order, each answered in a future: the
pipeline's counting process and the registry's checking process are each one of these.

>>> worker = OrderedWorker(name="tokmaint-example")
>>> futures = [worker.call(pow, 2, k) for k in range(4)]  # all down the pipe at once
>>> [f.result(timeout=60) for f in futures]
[1, 2, 4, 8]
>>> worker.close()

Why not ``ProcessPoolExecutor``: it hands each task to a feeder thread and takes each result
through a manager thread, and both wait for the GIL while the caller works (counting, parsing a
tokenizer.json for ~50 ms); its pipes hold 64 KiB, a step's counts ~400 KiB, so the worker sat
blocked mid-send until the caller's thread came round (13% of its time, measured). Here the
caller writes a call down the pipe itself, a thread of its own only reads answers, and both
pipes are widened to hold a step.

A worker that dies (SIGKILL, out of memory, a crash in a library) fails the call it was on with
:class:`WorkerDied`. Without ``restart`` it fails every pending call too, and refuses more; with
``restart`` a new process takes the calls queued behind, in order. A worker whose caller's
process is gone exits by itself.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import pickle
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any, TypeVar

_T = TypeVar("_T")  # what a call's function returns, and its future holds

PIPE_BYTES = 1 << 20  # each pipe's buffer (Linux's default limit for a process without privileges)


class WorkerDied(RuntimeError):
    """The worker process is gone: the call it was on (and, without restart, every pending call)
    never finishes."""


def _widen(connection: Connection) -> None:
    """Give the pipe under ``connection`` a buffer of ``PIPE_BYTES`` where the system allows
    (Linux; elsewhere, or over its limit, it keeps its own: slower, no less correct)."""
    try:
        fcntl.fcntl(connection.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (AttributeError, OSError):
        pass


def _serve(requests: Connection, results: Connection, parent: int, name: str) -> None:
    """The worker: answer each ``(function, args)`` in order with ``(True, result)`` or
    ``(False, exception)``, until ``None`` or the caller's process is gone."""

    def watch() -> None:  # the caller's process cannot tell us when it is killed
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name=f"{name}-orphan-watch", daemon=True).start()
    while True:
        try:
            task = requests.recv()
        except EOFError:  # the caller's end of the pipe is closed: it is gone
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
            data = pickle.dumps((False, RuntimeError(f"{name}'s answer: {type(exc).__name__}: {exc}")))
        try:
            results.send_bytes(data)
        except OSError:  # the caller is gone while this was worked on
            return


class OrderedWorker:
    """A worker process (spawned, not forked: the caller has threads) that runs calls in the
    order they are sent; ``restart``: a new process replaces one that dies."""

    def __init__(self, *, name: str, restart: bool = False) -> None:
        self._name, self._restart = name, restart
        # One call down the pipe at a time, its future queued first; the reader takes only the
        # queue's lock, so that a send that waits for the worker never keeps it from answers.
        self._sending, self._lock = threading.Lock(), threading.Lock()
        self._pending: deque[tuple[Future[Any], tuple[Callable[..., Any], tuple[Any, ...]]]] = deque()
        self._dead: WorkerDied | None = None
        self._closed = False
        self._start()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        theirs_requests, requests = context.Pipe(duplex=False)
        results, theirs_results = context.Pipe(duplex=False)
        for connection in (requests, results):
            _widen(connection)
        process = context.Process(
            target=_serve, args=(theirs_requests, theirs_results, os.getpid(), self._name), name=self._name, daemon=True
        )
        process.start()
        theirs_requests.close()  # the worker's ends: its exit then reads as the end of the pipe here
        theirs_results.close()
        self._requests, self._process = requests, process
        threading.Thread(target=self._read, args=(results, process), name=f"{self._name}-results", daemon=True).start()

    @property
    def pid(self) -> int | None:
        """The current worker process's id."""
        return self._process.pid

    def call(self, function: Callable[..., _T], *args: Any) -> Future[_T]:
        """Run ``function(*args)`` (both picklable) in the worker, after what was sent before;
        raises :class:`WorkerDied` when the worker is gone for good."""
        future: Future[_T] = Future()
        with self._sending:
            with self._lock:
                if self._dead is not None:
                    raise self._dead
                self._pending.append((future, (function, args)))
            try:
                self._requests.send((function, args))
            except OSError:  # gone: the reader answers every pending call, this one with them
                pass
        return future

    def _read(self, results: Connection, process: multiprocessing.process.BaseProcess) -> None:
        """On a thread of its own: each answer to the oldest pending future; when the worker is
        gone, the call it was on fails, and the rest go to a new one or fail too."""
        while True:
            try:
                data = results.recv_bytes()
            except (EOFError, OSError):
                break
            with self._lock:
                future, _ = self._pending.popleft()
            try:
                ok, value = pickle.loads(data)
            except Exception as exc:  # an exception of the worker's that does not unpickle here
                ok, value = False, RuntimeError(f"{self._name}'s answer: {type(exc).__name__}: {exc}")
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
        results.close()
        process.join()
        code = process.exitcode
        died = WorkerDied(f"{self._name} exited" + (f" (code {code})" if code else ""))
        with self._sending:
            with self._lock:
                waiting, self._pending = list(self._pending), deque()
                restart = self._restart and not self._closed
                if not restart:
                    self._dead = died
            if restart:
                # The call it was on fails (it may be what killed it); those queued behind it go
                # to the new process, in order, before any call sent from now on.
                self._start()
                for future, task in waiting[1:]:
                    with self._lock:
                        self._pending.append((future, task))
                    try:
                        self._requests.send(task)
                    except OSError:
                        pass
                waiting = waiting[:1]
        for future, _ in waiting:
            future.set_exception(died)

    def kill(self) -> None:
        """Kill the worker now (a call that runs too long): its call fails with :class:`WorkerDied`."""
        self._process.kill()

    def close(self, *, timeout: float = 30.0) -> None:
        """Stop the worker once it has answered what it was sent (killed after ``timeout`` s)."""
        with self._sending:
            with self._lock:
                self._closed = True
                requests, process = self._requests, self._process
            try:
                requests.send(None)
            except OSError:
                pass
        process.join(timeout=timeout)
        if process.is_alive():
            process.kill()
            process.join()
        requests.close()

    def __enter__(self) -> OrderedWorker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
