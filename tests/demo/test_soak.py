"""``tokmaint bench soak``, short: 50 s of load (150 documents a second) with a fault every three
seconds or so in the first half minute (the seeded schedule kills the trainer four times, the
ingest server twice, the pipeline and redis-server), the registry stopped from 5 s to 40 s
(longer than any patience a trainer had: the trainer, killed four times meanwhile, the first
before its first checkpoint, starts again without it each time), and the hostile clients (slow
readers and writers, oversized and sparse uploads, model uploads while garbage collection runs),
then every check the full soak makes, the statistics against an uninterrupted replay and no
trainer death included."""

import json
import os
import subprocess
import sys


def test_a_short_soak_loses_nothing_and_counts_nothing_twice():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tokmaint.cli",
            "bench",
            "soak",
            "--minutes",
            "0.5",
            "--seed",
            "3",
            "--fault-every",
            "4",
            "--rate",
            "150",
            "--registry-outage",
            "35",
            "--hostile",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        # A version's new rows warm up on 32 documents, not 256 (tests/trainer/test_new_rows.py
        # tests the warm-up): the trainer takes each version sooner after a kill.
        env={**os.environ, "TOKMAINT_TRAINER_WARM_DOCS": "32"},
    )
    report = json.loads(result.stdout)
    assert result.returncode == 0, (report, result.stderr[-3000:])
    documents = report["documents"]
    assert documents["accepted"] > 1000 and documents["resent"] > 0 and documents["refused"] > 0
    assert report["load_seconds"] == 50  # the outage ends at 40 s, and the load goes on 10 s more
    assert documents["accepted"] <= 150 * (50 + 5)  # paced: the 50 s and the producer's first second
    assert (documents["lost"], documents["duplicated"]) == (0, 0)
    assert documents["counted"] == documents["on_topic"] >= documents["accepted"]
    assert documents["dead_lettered"] >= documents["refused"]
    assert report["versions"]["published"] > 2 and report["versions"]["gaps"] == report["versions"]["duplicates"] == 0
    assert report["trainer"]["versions_taken"] and report["trainer"]["resumes"] >= 1
    assert report["trainer_deaths"] == 0 and report["faults"]["registry_outage"]["seconds"] >= 35
    assert report["http"]["unexplained_server_errors"] == 0 and report["http"]["requests"] > 100
    assert report["faults"]["injected"] >= 6 and report["processes_left"] == [] and report["exited_on_their_own"] == {}
    statistics = report["statistics"]  # an uninterrupted offline replay of the steps the pipeline counted
    assert statistics["steps"] > 10 and statistics["revisions"] == report["versions"]["published"] - 1
    assert statistics["versions_equal"] and statistics["tokens_equal"] and statistics["pairs_equal"]
    assert report["redis"]["aof_rewrites"] > 0 and report["redis"]["aof_mb"] > 0
    hostile = report["hostile"]  # nobody locked out, nothing deleted
    assert report["http"]["starved"] == 0 and hostile["reads"] > 100
    assert hostile["missing_artifacts"] == [] and hostile["gc_errors"] == [] and hostile["counts"]["gc_runs"] > 10
    assert hostile["answers"]["model_upload"].get("201", 0) > 3 and hostile["counts"]["slow_readers"] >= 12
    answers = hostile["answers"]  # each refused as it should be (or unanswered while its server was down)
    assert hostile["accepted_bad"] == 0 and answers["sparse_upload"].get("422", 0) > 0
    assert answers["oversized_registry"].get("413", 0) > 0 and answers["oversized_ingest"].get("413", 0) > 0
    assert "kill" in result.stderr  # the schedule is printed, to replay a failing run
