"""tokenizer_service/bench/drift.py: ``bench drift``."""

import gzip
import json

from tests.support.cli import run, run_json

# The drifting corpus (600 documents): Old and New on its first and last 30%, revisions every 50.
SMALL_DRIFT = (
    "--vocab-size 300 --held-out 50 --old-share 0.3 --new-share 0.3 "
    "--step-docs 10 --horizon-docs 30 --interval-docs 50 --warmup-docs 50"
).split()


def test_drift_gap_is_null_when_old_and_new_compress_alike(tmp_path, capsys):
    path = tmp_path / "spaces.jsonl"
    path.write_text("\n".join(json.dumps({"text": " " * (1 + i % 3)}) for i in range(200)))
    code, out, _ = run(
        ["bench", "drift", "--corpus", str(path), "--vocab-size", "300", "--held-out", "10", "--json"], capsys
    )
    [row] = json.loads(out)["rows"]
    assert code == 0 and row["bpt_old"] == row["bpt_new"] and row["gap_closed"] is None


def test_bench_drift_closes_the_gap_within_its_id_budget(drifting_corpus, capsys):
    result = run_json(
        capsys,
        "bench",
        "drift",
        "--corpus",
        str(drifting_corpus),
        *SMALL_DRIFT,
        "--batch-size",
        "20",
    )
    [row] = result["rows"]
    assert row["bpt_new"] > row["bpt_old"] and row["bpt_tedtok"] > row["bpt_old"]
    assert row["gap_closed"] > 0.5
    # A revision changes at most K = 20 ids of the 300, and it did change some.
    assert row["revisions"] >= 1
    assert 1 - row["revisions"] * 20 / 300 <= row["ids_stable"] < 1
    assert row["stream_docs"] == 370
    assert result["worst"] == [
        {"price": 1.0, "gap_closed": row["gap_closed"], "ids_stable": row["ids_stable"], "gap_undefined": 0}
    ]
    assert result["verdicts"] == []  # no sweep, no frontier to judge the default on


def test_bench_drift_sweeps_several_corpora_and_plots(drifting_corpus, tmp_path, capsys):
    other = tmp_path / "reversed.jsonl"
    with gzip.open(drifting_corpus, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    other.write_text(
        "\n".join(json.dumps({"ts": r["ts"], "text": t["text"]}) for r, t in zip(records, reversed(records)))
    )
    argv = [
        "bench",
        "drift",
        "--corpus",
        str(drifting_corpus),
        "--corpus",
        str(other),
        *SMALL_DRIFT,
        "--sweep",
        "0,1,8",
        "--plot",
        str(tmp_path / "plot"),
    ]
    result = run_json(capsys, *argv)
    rows = result["rows"]
    assert [(r["corpus"], r["price"]) for r in rows] == [
        (name, p) for name in ("stream", "reversed") for p in (0.0, 1.0, 8.0)
    ]
    for w in result["worst"]:
        at = [r for r in rows if r["price"] == w["price"]]
        assert w["gap_closed"] == min(r["gap_closed"] for r in at)
        assert w["ids_stable"] == min(r["ids_stable"] for r in at)
    # A higher price buys fewer changes: ids_stable never falls as the price rises.
    for name in ("stream", "reversed"):
        ids = [r["ids_stable"] for r in rows if r["corpus"] == name]
        assert ids[1] <= ids[2]
    assert (tmp_path / "plot" / "drift.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # One verdict per corpus on its default (price 1), each figure checked against the rows.
    for verdict in result["verdicts"]:
        points = [r for r in rows if r["corpus"] == verdict["corpus"]]
        [default] = [r for r in points if r["price"] == 1.0]
        assert (verdict["gap_closed"], verdict["ids_stable"]) == (default["gap_closed"], default["ids_stable"])
        assert verdict["meets_targets"] == (default["gap_closed"] >= 0.92 and default["ids_stable"] >= 0.87)
        assert verdict["on_frontier"] == (
            not any(r["gap_closed"] > default["gap_closed"] and r["ids_stable"] > default["ids_stable"] for r in points)
        )
        assert verdict["frontier_allows"] or not verdict["meets_targets"]
    assert [v["corpus"] for v in result["verdicts"]] == ["stream", "reversed"]
    # An earlier report's frontiers are drawn beside this run's.
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps(result))
    code, out, _ = run([*argv[:-1], str(tmp_path / "compared"), "--compare", str(earlier)], capsys)
    assert code == 0 and "default (price 1)" in out and "meets_targets" in out
    compared = (tmp_path / "compared" / "drift.png").read_bytes()
    assert compared[:8] == b"\x89PNG\r\n\x1a\n" and compared != (tmp_path / "plot" / "drift.png").read_bytes()
