"""The scale-out job on a real Flink cluster (a JobManager and two TaskManagers from the wheel),
a real broker, redis-server and registry: a short stream with bad records and, mid-stream,
documents dated 2099, 9999 and 1960 with those Kafka timestamps, one TaskManager killed with
SIGKILL mid-run (between two steps, before the stream's last third has arrived), the job then
stopped with a savepoint and resumed from it, and the statistics and versions equal to the
offline replay of the ordinary documents."""

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.flink_bench import BAD_RECORDS, OUT_OF_WINDOW, FlinkBenchSettings, run_flink_bench
from tests.support.cli import run
from tests.support.polling import until

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "git-commits-sample.jsonl.gz"


def test_the_job_on_flink_survives_a_taskmanager_kill_and_a_savepoint_resume_and_equals_the_replay():
    report = run_flink_bench(
        SAMPLE, FlinkBenchSettings(max_mb=0.5, steps=12, interval_steps=3, vocab_size=600, kill=True), progress=False
    )
    assert report["taskmanager_killed"] is True
    assert 12 // 3 <= report["killed_at_step"] < report["steps"]  # once a third were written
    # Stopped with a savepoint once half were written, the rest posted meanwhile, resumed from it.
    assert report["savepoint_resumed"] is True and "/savepoints/savepoint-" in report["savepoint"], report
    # Every Python function ran inside the TaskManagers' JVMs, none fell back to a worker process.
    assert report["execution_mode"] == {"count": "thread", "decode": "thread", "write steps": "thread"}, report
    # The shards' keys fall on the subtasks evenly (flink_job.shard_keys: Flink's key groups).
    assert report["shards_by_subtask"] and all(len(shards) == 2 for shards in report["shards_by_subtask"]), report
    assert sorted(set(sum(report["shards_by_subtask"], []))) == [0, 1, 2, 3], report
    assert report["checkpoint_ms_p50"] is None or report["checkpoint_ms_p50"] > 0
    assert report["equal_to_replay"] is True, report
    assert report["local_equal_to_replay"] is True, report
    assert report["steps"] == report["replay_steps"] >= 10
    assert report["versions"] >= 2  # revisions were made and published on the cluster
    # Each record that is not a Document and each document dated outside the window, once by its content.
    assert report["dead_lettered"] == len(BAD_RECORDS) + len(OUT_OF_WINDOW) == 7
    reasons = report["dead_letter_reasons"]
    assert sum("ahead of the clock" in reason for reason in reasons) == 2, reasons  # 2099 and 9999
    assert sum("is not after the epoch" in reason for reason in reasons) == 2, reasons  # 1960 and 1970-01-01
    assert not any(reason.startswith("late") for reason in reasons), reasons
    # The writer's lines time the steps; a kill can take those of the steps written just before it.
    assert 0 <= report["steps_timed"] <= report["steps"]
    assert report["flink_steady_mb_s"] is None or report["flink_steady_mb_s"] > 0


def _jvms(work: Path) -> list[int]:
    """The processes whose command line names ``work`` (the cluster's JVMs, and whatever started them)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(work).encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:  # it ended meanwhile
            continue
    return found


def _running(pid: int) -> bool:
    """Whether the process ``pid`` is there and not a zombie (one that ended, not yet reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_make_flink_stops_its_jvms_on_sigterm_and_sighup_and_a_drain_of_no_job_says_so(stop, tmp_path, capsys):
    """``make flink``'s cluster (``python -m pipeline.flink_cluster``) stops its three JVMs on
    SIGTERM once it is up and on SIGHUP while its TaskManagers are still registering, as on
    Ctrl-C; while it runs, ``--drain`` and ``--stop-with-savepoint`` of a lineage with no job
    there say so at once, in one line."""
    work = tmp_path / "flink"
    cluster = subprocess.Popen(
        [sys.executable, "-m", "pipeline.flink_cluster", "--work", str(work)], stdout=subprocess.PIPE, text=True
    )
    try:
        if stop == signal.SIGHUP:  # as soon as the three JVMs are there: a start cut short
            jvms = until(
                lambda: len(found := [p for p in _jvms(work) if p != cluster.pid]) == 3 and found, "3 JVMs", 60
            )
        else:
            line = cluster.stdout.readline()
            master = re.search(r"--flink-master (\S+?)\)", line)
            assert master is not None, line
            jvms = [pid for pid in _jvms(work) if pid != cluster.pid]
        assert len(jvms) == 3  # the JobManager and two TaskManagers
        if stop == signal.SIGTERM:  # once: it needs a JobManager, not a signal
            asked = time.monotonic()
            code, out, err = run(
                ["pipeline", "flink", "--drain", "--lineage", "nosuchjob", "--flink-master", master[1]], capsys
            )
            assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
            assert f"no job tokmaint-nosuchjob runs at {master[1]}" in err and time.monotonic() - asked < 15
            code, out, err = run(
                ["pipeline", "flink", "--stop-with-savepoint", "--lineage", "nosuchjob", "--flink-master", master[1]],
                capsys,
            )
            assert code == 2 and err.count("\n") == 1 and f"no job tokmaint-nosuchjob runs at {master[1]}" in err, err
        cluster.send_signal(stop)
        assert cluster.wait(timeout=90) == 0
        # Cut short, a JVM may be a child of its start script, and ends a moment after it, reaped by init.
        until(lambda: not any(map(_running, jvms)), f"the JVMs {jvms} outlived the cluster", 30)
    finally:
        if cluster.poll() is None:
            cluster.kill()


def test_the_job_s_spec_from_the_environment_as_the_kubernetes_operator_runs_it(monkeypatch):
    """``python -m pipeline.flink_job --from-env`` (the prod overlay's FlinkDeployment): the
    spec from tokmaint's settings, the parallelism left to the cluster; what is missing is named,
    all of it in one line."""
    from pipeline.flink_job import spec_from_env
    from tokenizer_service.errors import TokmaintError

    for name in ("TOKMAINT_LINEAGE", "TOKMAINT_REGISTRY_URL", "TOKMAINT_PIPELINE_STEP_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(TokmaintError) as refused:
        spec_from_env()
    assert str(refused.value).endswith("TOKMAINT_LINEAGE, TOKMAINT_REGISTRY_URL, TOKMAINT_PIPELINE_STEP_SECONDS")
    monkeypatch.setenv("TOKMAINT_LINEAGE", "news")
    monkeypatch.setenv("TOKMAINT_REGISTRY_URL", "http://tokmaint-registry:8000")
    monkeypatch.setenv("TOKMAINT_PIPELINE_STEP_SECONDS", "3600")
    monkeypatch.setenv("TOKMAINT_KAFKA", "kafka:9092")
    monkeypatch.setenv("TOKMAINT_FLINK_MAX_LATENESS_SECONDS", "90")
    spec = spec_from_env()
    assert (spec.lineage, spec.registry, spec.step_seconds, spec.parallelism) == (
        "news",
        "http://tokmaint-registry:8000",
        3600,
        None,
    )
    assert spec.pipeline.bootstrap == "kafka:9092" and spec.max_lateness_seconds == 90
