"""tokenizer_service/bench/throughput.py: ``bench throughput``."""

import gzip
import json

import pytest

from tests.support.cli import run_json


def test_bench_throughput_times_what_it_says(drifting_corpus, capsys):
    result = run_json(
        capsys,
        "bench",
        "throughput",
        "--corpus",
        str(drifting_corpus),
        "--vocab-size",
        "400",
        "--tracked-pairs",
        "5000",
        "--step-docs",
        "100",
        "--batch-size",
        "10",
    )
    with gzip.open(drifting_corpus, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    assert result["documents"] == len(texts)
    assert result["megabytes"] == pytest.approx(sum(len(t.encode("utf-8")) for t in texts) / 1e6)
    assert result["tracked_pairs"] >= 5000
    assert result["revision_changes"] == 10  # K=10 adds, each recycling one deleted id
