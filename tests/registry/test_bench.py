"""``tokmaint bench registry`` on a real server held to two requests at once, so that the short
load ramp overloads it: it refuses with 503 past that, never hangs, and every rollback it
answered 201 is a version numbered as answered."""

from tests.support.cli import OVERLOAD_RAMP, run_json


def _bench_registry(capsys, corpus, *options):
    """``bench registry --json`` on ``corpus`` with a 300-token tokenizer and two clients."""
    return run_json(
        capsys, "bench", "registry", "--corpus", str(corpus), "--vocab-size", "300", "--clients", "2", *options
    )


def test_the_load_ramp_overloads_the_registry_and_no_accepted_write_is_lost(drifting_corpus, capsys):
    result = _bench_registry(capsys, drifting_corpus, "--max-mb", "0.2", "--publishes", "2", *OVERLOAD_RAMP)
    assert result["publishes"] == 2 and result["get_rps"] > 0 and result["get_304_rps"] > 0
    load = result["load"]
    assert load["hung"] == 0 and load["failed"] == 0 and load["max_in_flight"] == 2
    assert load["past_it"]["refused"] > 0 and load["past_it"]["server_errors"] == 0
    assert load["writes"]["accepted"] > 0 and load["writes"]["lost"] == 0


def test_bench_registry_measures_a_real_server(drifting_corpus, capsys):
    result = _bench_registry(
        capsys,
        drifting_corpus,
        *("--batch-size", "5", "--publishes", "3", "--seconds", "0.3", "--repeats", "1"),
        # Two steps of the load ramp: the ramp's own test is the one above.
        *("--start-rps", "200", "--max-rps", "400"),
    )
    assert 0 < result["publish_ms"]["p50"] <= result["publish_ms"]["p99"]
    assert result["get_rps"] > 0 and result["get_304_rps"] > 0
    assert result["publishes"] == 3 and result["changed_ids_per_publish"] == 5
    assert 0 < result["tokenizer_mb"] < 1
    hub = result["hub_download_ms"]
    assert result["hub_resolve_rps"] > 0 and hub["tokens"] == 300
    assert min(hub["cold"], hub["warm"], hub["disk"]) > 0 and hub["warm_vs_disk"] == hub["warm"] / hub["disk"]
