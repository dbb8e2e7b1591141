"""The checking process: the same reports as the checks in-process, and a process that dies
answers its pending checks as refusals and is replaced."""

import os
import signal
import time

from registry.checker import DIED, EncodingChecker
from tokenizer_service.validation import check_encoding

BROKEN = b'{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "b"]]}}'


def test_reports_equal_the_in_process_checks(byte_tokenizer):
    checker = EncodingChecker()
    try:
        good, broken = checker.submit(byte_tokenizer.to_json().encode()), checker.submit(BROKEN)
        expected = check_encoding(byte_tokenizer.to_json())
        assert vars(good.result(timeout=60)) == vars(expected) and expected.ok
        report = broken.result(timeout=60)
        assert report.unusable == check_encoding(BROKEN.decode()).unusable
        assert report.unusable[0].startswith("tokenizer.json does not load in tokenizers")
    finally:
        checker.close()


def test_a_dead_checking_process_refuses_its_checks_and_is_replaced(byte_tokenizer):
    checker = EncodingChecker()
    try:
        data = byte_tokenizer.to_json().encode()
        first = checker._process
        pending = [checker.submit(data) for _ in range(20)]  # ~100 ms of work queued
        os.kill(first.pid, signal.SIGKILL)
        reports = [f.result(timeout=60) for f in pending]
        assert all(r.ok or r.unusable == [DIED] for r in reports)
        assert any(r.unusable == [DIED] for r in reports)
        deadline = time.monotonic() + 60
        while checker._process is first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert checker._process is not first
        assert checker.submit(data).result(timeout=60).ok
    finally:
        checker.close()
