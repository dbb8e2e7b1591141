"""The ``tokenizers`` library's checks of uploads (``validation.check_encoding``) in a process of
their own, beside the server's own checks of the same upload.

The caller writes the upload's bytes down a pipe itself, at once: handed to a feeder thread
instead (as ``ProcessPoolExecutor`` does), they would wait until the caller's JSON parse, which
holds the GIL for ~50 ms at 50k tokens, let that thread run. Reports come back in order
(``tokenizer_service.ordered_worker.OrderedWorker``). If the process dies (a crash in the
library, memory), the check it was on is refused and a new process takes the next ones.

    checker = EncodingChecker()
    report = checker.submit(Path("tokenizer.json").read_bytes())
    ...                                  # parse and check the rest meanwhile
    checker.report(report).reasons
    checker.close()
"""

from __future__ import annotations

from concurrent.futures import Future, TimeoutError

from tokenizer_service.ordered_worker import OrderedWorker, WorkerDied
from tokenizer_service.validation import ValidationReport, check_encoding

DIED = "the checking process died loading it (tokenizers crashed, or ran out of memory)"


def _refusal(reason: str) -> ValidationReport:
    report = ValidationReport()
    report.refuse(reason)
    return report


def _check(data: bytes) -> ValidationReport:
    """In the checking process: the report on one upload."""
    try:
        return check_encoding(data.decode("utf-8"))
    except Exception as exc:  # a bug of ours must not look like a crash of the library
        return _refusal(f"checking it failed: {type(exc).__name__}: {exc}")


class EncodingChecker:
    """One checking process, replaced when it dies."""

    def __init__(self) -> None:
        self._worker = OrderedWorker(name="tokmaint-checker", restart=True)
        self._closed = False

    def submit(self, data: bytes) -> Future[ValidationReport]:
        """Start checking ``data`` (a tokenizer.json's bytes); its report comes in the future
        (a refusal when the process died on it or the registry is shutting down)."""
        report: Future[ValidationReport] = Future()
        if self._closed:
            report.set_result(_refusal("the registry is shutting down"))
            return report

        def answered(check: Future[ValidationReport]) -> None:
            died = isinstance(check.exception(), WorkerDied)
            report.set_result(_refusal(DIED) if died else check.result())

        try:
            self._worker.call(_check, data).add_done_callback(answered)
        except WorkerDied:  # closed meanwhile
            report.set_result(_refusal("the registry is shutting down"))
        return report

    def report(self, future: Future[ValidationReport], *, timeout: float = 300.0) -> ValidationReport:
        """The future's report; a check that takes longer than ``timeout`` seconds is stopped
        (the process is killed and replaced) and refused."""
        try:
            return future.result(timeout=timeout)
        except TimeoutError:
            self._worker.kill()  # the check it was on fails, and a new process takes the next ones
            report = future.result(timeout=60)
            return _refusal(f"checking it took over {timeout:g} s: stopped") if report.unusable == [DIED] else report

    def close(self) -> None:
        """Stop the process once it has answered what it has."""
        self._closed = True
        self._worker.close()
