"""The scale-out job on a real Flink cluster (a JobManager and two TaskManagers from the wheel),
a real broker, redis-server and registry: a short stream with bad records and, mid-stream,
documents dated 2099, 9999 and 1960 with those Kafka timestamps, one TaskManager killed with
SIGKILL mid-run (between two steps, before the stream's last third has arrived), and the
statistics and versions equal to the offline replay of the ordinary documents."""

from pathlib import Path

from pipeline.flink_bench import BAD_RECORDS, OUT_OF_WINDOW, FlinkBenchSettings, run_flink_bench

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "git-commits-sample.jsonl.gz"


def test_the_job_on_flink_survives_a_taskmanager_kill_and_equals_the_replay():
    report = run_flink_bench(
        SAMPLE, FlinkBenchSettings(max_mb=0.5, steps=12, interval_steps=3, vocab_size=600, kill=True), progress=False
    )
    assert report["taskmanager_killed"] is True
    assert 12 // 3 <= report["killed_at_step"] < report["steps"]  # once a third were written
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
