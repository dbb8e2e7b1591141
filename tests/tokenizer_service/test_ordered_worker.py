"""``tokenizer_service.ordered_worker``: calls answered in order over pipes wider than a page, what
does not travel fails its own call only, and a worker that dies fails the call it was on, then
either refuses more or is replaced, taking the calls queued behind in order."""

import fcntl
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest

from tokenizer_service import ordered_worker
from tokenizer_service.ordered_worker import OrderedWorker, WorkerDied


def _echo(value, seconds=0.0):
    time.sleep(seconds)
    return value


class _TwoArgumentError(Exception):
    def __init__(self, a, b):  # pickles as _TwoArgumentError(a): it does not unpickle
        super().__init__(a)


def _unpicklable_error() -> None:
    raise _TwoArgumentError("a", "b")


def _unpicklable_answer():
    return lambda: None


def test_calls_are_answered_in_order_and_errors_raised_by_their_future():
    with OrderedWorker(name="tokmaint-test") as worker:
        futures = [worker.call(_echo, k, 0.01 * (k % 3)) for k in range(20)]
        failing = worker.call(int, "x")
        assert [f.result(timeout=60) for f in futures] == list(range(20))
        with pytest.raises(ValueError, match="invalid literal"):
            failing.result(timeout=60)
        assert worker.call(_echo, "on").result(timeout=60) == "on"


def test_calls_larger_than_the_pipes_go_through(monkeypatch):
    # Pipes of a page: every call and its answer outgrow them, so the caller's send waits for the
    # worker's reads while answers come back, and neither side may wait on the other for good.
    monkeypatch.setattr(ordered_worker, "PIPE_BYTES", 4096)
    big = ["word"] * 20_000
    assert len(pickle.dumps(big)) > 2 * 4096
    with OrderedWorker(name="tokmaint-test") as worker:
        assert fcntl.fcntl(worker._requests.fileno(), fcntl.F_GETPIPE_SZ) == 4096
        futures = [worker.call(_echo, big) for _ in range(5)]
        assert all(f.result(timeout=60) == big for f in futures)


def test_answers_that_do_not_travel_fail_their_own_future_only():
    with OrderedWorker(name="tokmaint-test") as worker:
        with pytest.raises(RuntimeError, match="tokmaint-test's answer: .*pickle"):
            worker.call(_unpicklable_answer).result(timeout=60)
        with pytest.raises(RuntimeError, match="answer: TypeError"):
            worker.call(_unpicklable_error).result(timeout=60)
        assert worker.call(_echo, 1).result(timeout=60) == 1


def test_a_killed_worker_fails_what_is_pending_and_refuses_more():
    worker = OrderedWorker(name="tokmaint-test")
    try:
        pending = [worker.call(_echo, k, 0.05) for k in range(5)]
        os.kill(worker.pid, signal.SIGKILL)
        for future in pending:
            with pytest.raises(WorkerDied, match="tokmaint-test exited"):
                future.result(timeout=30)
        with pytest.raises(WorkerDied, match=r"code -9"):
            worker.call(_echo, 1)
    finally:
        worker.close()


def test_a_restarting_worker_fails_the_call_it_was_on_and_a_new_one_takes_the_rest_in_order():
    worker = OrderedWorker(name="tokmaint-test", restart=True)
    try:
        first = worker.pid
        on_it = worker.call(_echo, "slow", 30)
        queued = [worker.call(_echo, k) for k in range(10)]
        time.sleep(0.5)  # the worker is inside the slow call
        worker.kill()
        with pytest.raises(WorkerDied, match="code -9"):
            on_it.result(timeout=30)
        assert [f.result(timeout=60) for f in queued] == list(range(10))
        assert worker.pid != first and worker.call(_echo, "next").result(timeout=60) == "next"
    finally:
        worker.close()


def test_a_worker_whose_caller_is_killed_exits_by_itself(tmp_path):
    pid_file = tmp_path / "pid"
    caller = (
        "import sys, time; from tokenizer_service.ordered_worker import OrderedWorker; "
        "import os; w = OrderedWorker(name='tokmaint-test'); "
        f"open({str(pid_file)!r}, 'w').write(str(w.pid)); time.sleep(600)"
    )
    process = subprocess.Popen([sys.executable, "-c", caller])
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    worker_pid = int(pid_file.read_text())
    process.kill()
    process.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(worker_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(worker_pid, signal.SIGKILL)
        pytest.fail("the worker outlived its caller by 10 s")
