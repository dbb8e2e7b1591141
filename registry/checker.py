"""The ``tokenizers`` library's checks of uploads (``validation.check_encoding``) in a process of
their own, beside the server's own checks of the same upload.

The caller writes the upload's bytes down a pipe itself, at once: handed to a feeder thread
instead (as ``ProcessPoolExecutor`` does), they would wait until the caller's JSON parse, which
holds the GIL for ~50 ms at 50k tokens, let that thread run. Reports come back in order through
a reader thread. If the process dies (a crash in the library, memory), the checks it had are
answered as refusals and a new process takes the next ones.

    checker = EncodingChecker()
    report = checker.submit(Path("tokenizer.json").read_bytes())
    ...                                  # parse and check the rest meanwhile
    report.result().reasons
    checker.close()
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, TimeoutError
from multiprocessing import get_context
from multiprocessing.connection import Connection

from tokenizer_service.validation import ValidationReport, check_encoding

DIED = "the checking process died loading it (tokenizers crashed, or ran out of memory)"


def _serve(connection: Connection) -> None:
    """The checking process: a report for every upload, in order, until the pipe closes."""
    while True:
        try:
            data = connection.recv()
        except EOFError:
            return
        if data is None:  # asked to stop
            return
        try:
            report = check_encoding(data.decode("utf-8"))
        except Exception as exc:  # a bug of ours must not look like a crash of the library
            report = ValidationReport()
            report.refuse(f"checking it failed: {type(exc).__name__}: {exc}")
        connection.send(report)


class EncodingChecker:
    """One checking process (spawned: the server's threads must not be forked mid-flight)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the pending checks and the current process
        self._sending = threading.Lock()  # one upload down the pipe at a time, in pending's order
        self._pending: deque[tuple[Future[ValidationReport], bytes]] = deque()
        self._closed = False
        self._start()

    def _start(self) -> None:
        context = get_context("spawn")
        self._connection, theirs = context.Pipe()
        self._process = context.Process(target=_serve, args=(theirs,), daemon=True, name="tokmaint-checker")
        self._process.start()
        theirs.close()
        threading.Thread(target=self._read, args=(self._connection, self._process), daemon=True,
                         name="tokmaint-checker-reader").start()

    def _read(self, connection: Connection, process) -> None:
        while True:
            try:
                report = connection.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future, _ = self._pending.popleft()
            future.set_result(report)
        process.join()
        with self._sending, self._lock:
            if self._connection is not connection:
                return
            waiting, self._pending = list(self._pending), deque()
            if not self._closed:
                self._start()
        # The check the process was on is refused (its upload may be what killed it); the ones
        # queued behind it go to the new process.
        for k, (future, data) in enumerate(waiting):
            if k == 0 or self._closed:
                report = ValidationReport()
                report.refuse(DIED)
                future.set_result(report)
            else:
                self._send(future, data)

    def submit(self, data: bytes) -> Future[ValidationReport]:
        """Start checking ``data`` (a tokenizer.json's bytes); its report comes in the future."""
        future: Future[ValidationReport] = Future()
        if self._closed:
            report = ValidationReport()
            report.refuse("the registry is shutting down")
            future.set_result(report)
            return future
        self._send(future, data)
        return future

    def _send(self, future: Future[ValidationReport], data: bytes) -> None:
        with self._sending:
            with self._lock:
                self._pending.append((future, data))
                connection = self._connection
            try:
                connection.send(data)
            except OSError:  # the process is gone: the reader answers every pending check
                pass

    def report(self, future: Future[ValidationReport], *, timeout: float = 300.0) -> ValidationReport:
        """The future's report; a check that takes longer than ``timeout`` seconds is stopped
        (the process is killed and replaced) and refused."""
        try:
            return future.result(timeout=timeout)
        except TimeoutError:
            self._process.kill()  # the reader refuses the check it was on and starts a new process
            report = future.result(timeout=60)
            if report.unusable == [DIED]:
                report = ValidationReport()
                report.refuse(f"checking it took over {timeout:g} s: stopped")
            return report

    def close(self) -> None:
        """Stop the process once it has answered what it has (a closed pipe alone would not
        wake it while the reader thread still waits on the pipe)."""
        with self._sending:
            with self._lock:
                self._closed = True
                connection, process = self._connection, self._process
            try:
                connection.send(None)
            except OSError:
                pass
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
            process.join()
        connection.close()
