"""``tokmaint bench ingest`` on a real broker and ingest server, held to two requests at once so
that the short ramp overloads it: past its limit it answers 503, never hangs, and every document
it accepted reached the topic exactly once."""

from tests.support.cli import OVERLOAD_RAMP, run_json


def test_past_its_limit_the_ingest_server_refuses_and_loses_nothing(capsys):
    result = run_json(
        capsys, "bench", "ingest", "--corpus", "data/git-commits-sample.jsonl.gz", "--docs", "200", *OVERLOAD_RAMP
    )
    assert [s["offered_rps"] for s in result["steps"]][:2] == [200, 400]
    assert result["hung"] == 0 and result["failed"] == 0
    assert result["past_it"]["refused"] > 0 and result["past_it"]["server_errors"] == 0
    documents = result["documents"]
    assert documents["accepted"] > 0 and documents["on_topic"] == documents["accepted"]
    assert documents["lost"] == documents["duplicated"] == documents["refused_but_produced"] == 0
