"""The checking process: the same reports as the checks in-process, and a process that dies
answers its pending checks as refusals and is replaced."""

import os
import signal
import time

import pytest

from registry.checker import DIED, EncodingChecker
from tokenizer_service.validation import check_encoding

BROKEN = b'{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "b"]]}}'


@pytest.fixture
def checker():
    """A checking process of its own, closed after the test whatever it did to it."""
    checker = EncodingChecker()
    yield checker
    checker.close()


def test_reports_equal_the_in_process_checks(checker, byte_tokenizer):
    good, broken = checker.submit(byte_tokenizer.to_json().encode()), checker.submit(BROKEN)
    expected = check_encoding(byte_tokenizer.to_json())
    assert vars(good.result(timeout=60)) == vars(expected) and expected.ok
    report = broken.result(timeout=60)
    assert report.unusable == check_encoding(BROKEN.decode()).unusable
    assert report.unusable[0].startswith("tokenizer.json does not load in tokenizers")


def test_a_dead_checking_process_refuses_the_check_it_was_on_and_is_replaced(checker, byte_tokenizer):
    data = byte_tokenizer.to_json().encode()
    first = checker._worker._process
    pending = [checker.submit(data) for _ in range(20)]  # ~100 ms of work queued
    os.kill(first.pid, signal.SIGKILL)
    reports = [f.result(timeout=60) for f in pending]
    # The check it was on is refused; those queued behind it go to the new process.
    assert sum(r.unusable == [DIED] for r in reports) == 1
    assert sum(r.ok for r in reports) == len(reports) - 1
    deadline = time.monotonic() + 60
    while checker._worker._process is first and time.monotonic() < deadline:
        time.sleep(0.05)
    assert checker._worker._process is not first
    assert checker.submit(data).result(timeout=60).ok


def test_a_check_that_takes_too_long_is_stopped_and_refused(checker, byte_tokenizer):
    data = byte_tokenizer.to_json().encode()
    report = checker.report(checker.submit(data), timeout=0.001)
    assert report.unusable == ["checking it took over 0.001 s: stopped"]
    assert checker.report(checker.submit(data)).ok  # a new process takes the next one
