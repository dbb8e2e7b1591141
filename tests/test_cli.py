import gzip
import json

import pytest
from tokenizers import Tokenizer

from schemas.revision import RevisionDiff
from tokenizer_service.cli import main
from tests.conftest import WORDS, sentences

NEW_WORDS = ["blockchain", "quantum", "llama", "vector", "prompt", "agentic", "embedding", "rollout"]


@pytest.fixture(scope="module")
def drifting_corpus(tmp_path_factory):
    """600 documents whose vocabulary moves from WORDS to NEW_WORDS over 'time'."""
    path = tmp_path_factory.mktemp("corpus") / "stream.jsonl.gz"
    old, new = sentences(300, seed=1), sentences(300, seed=2, words=NEW_WORDS + WORDS[:4])
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i, text in enumerate(old + new):
            f.write(json.dumps({"id": i, "ts": f"2020-01-01T00:{i // 60:02d}:{i % 60:02d}", "text": text}) + "\n")
    return path


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_evolve_writes_valid_versions(drifting_corpus, tmp_path, capsys):
    out = tmp_path / "versions"
    result = run_json(capsys, "evolve", "--corpus", str(drifting_corpus), "--out", str(out), "--vocab-size", "300",
                      "--step-docs", "10", "--alpha", "0.3", "--interval", "5", "--batch-size", "10",
                      "--init-share", "0.3")
    versions = sorted(p.name for p in out.glob("v*"))
    assert len(versions) == result["versions"] > 1
    assert not list(out.glob(".v*"))  # no staging leftovers
    for name in versions[1:]:
        diff = RevisionDiff.from_dict(json.loads((out / name / "diff.json").read_text()))
        assert Tokenizer.from_file(str(out / name / "tokenizer.json"))
        assert diff.version == int(name[1:]) and diff.entries
    steps = (out / "steps.jsonl").read_text().splitlines()
    assert len(steps) == result["steps"] == 42
    assert result["bytes_per_token"]["last_step"] > result["bytes_per_token"]["first_step"]


def test_bench_drift_reports_every_key(drifting_corpus, capsys):
    result = run_json(capsys, "bench", "drift", "--corpus", str(drifting_corpus), "--vocab-size", "300",
                      "--held-out", "50", "--old-share", "0.3", "--new-share", "0.3", "--step-docs", "10",
                      "--alpha", "0.3", "--interval", "5")
    bpt = result["bytes_per_token"]
    assert bpt["new"] > bpt["old"] and bpt["tedtok"] > bpt["old"]
    assert result["gap_closed"] == pytest.approx((bpt["tedtok"] - bpt["old"]) / (bpt["new"] - bpt["old"]))
    assert result["jaccard"]["tedtok_vs_new"] < result["jaccard"]["old_vs_new"]
    assert 0 < result["ids_stable"] < 1
    assert set(result["seconds"]) == {"revisions", "new_training"}


def test_bench_throughput_reports_every_key(drifting_corpus, capsys):
    result = run_json(capsys, "bench", "throughput", "--corpus", str(drifting_corpus), "--vocab-size", "400",
                      "--tracked-pairs", "5000", "--step-docs", "100", "--batch-size", "10")
    assert result["encode_mb_s"] > 0 and result["stats_mb_s"] > 0
    assert result["ratio"] == pytest.approx(result["stats_mb_s"] / result["encode_mb_s"])
    assert result["tracked_pairs"] >= 5000 and result["revision_seconds"] > 0
    assert result["revision_changes"] == 10


def test_bench_arithmetic_reproduces_table_2():
    """The full SA schedule (16,000 steps, ~1 min): Ted-Tok Table 2's targets, by running it."""
    from tokenizer_service.bench.arithmetic import run_arithmetic

    result = run_arithmetic(progress=False)
    assert result["bytes_per_token"]["tedtok"] >= 1.359
    assert result["jaccard"]["tedtok_vs_new"] <= 0.2456
    assert result["bytes_per_token"]["old"] < result["bytes_per_token"]["new"]
    assert result["jaccard"]["old_vs_new"] > 0.5


def test_missing_corpus_is_a_clear_error(tmp_path, capsys):
    assert main(["bench", "drift", "--corpus", str(tmp_path / "nope.jsonl")]) == 2
    assert "corpus not found" in capsys.readouterr().err


def test_malformed_corpus_line_is_named(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"ts": "1", "text": "ok"}\n{"text": "no ts"}\n')
    assert main(["evolve", "--corpus", str(path), "--out", str(tmp_path / "o")]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err


@pytest.fixture(scope="module")
def corpus_tokenizer(drifting_corpus, tmp_path_factory):
    """A tokenizer.json trained on the drifting corpus itself."""
    from tokenizer_service.bpe import BPETokenizer
    from tokenizer_service.corpus import read_corpus

    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    BPETokenizer.train([d.text for d in read_corpus(drifting_corpus)], vocab_size=330).save(path)
    return path


def test_residues_reports_every_key_and_writes_outputs(drifting_corpus, corpus_tokenizer, tmp_path, capsys):
    import pyarrow.parquet as pq

    out = tmp_path / "lite"
    result = run_json(capsys, "residues", "--tokenizer", str(corpus_tokenizer), "--corpus", str(drifting_corpus),
                      "--r", "0.5", "--s", "3", "--log-base", "2", "--out", str(out))
    for key in ("vocab_size", "scope_size", "unseen", "residues", "residue_share", "residue_share_ratio_only",
                "lossless", "export_agreement"):
        assert key in result
    assert result["residues"] > 0 and 0 < result["residue_share"] <= result["residue_share_ratio_only"] <= 1
    assert result["tokens"]["split"] >= result["tokens"]["remerged"] >= result["tokens"]["original"]
    assert result["lossless"] is True and 0.99 <= result["export_agreement"] <= 1
    assert result["thresholds"] == {"r": 0.5, "s": 3.0, "log_base": 2.0, "min_count": 0}
    diff = RevisionDiff.from_dict(json.loads((out / "diff.json").read_text()))
    assert len(diff.entries) == result["export"]["removed"]
    assert Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size() == result["export"]["vocab_size"]
    table = pq.read_table(out / "scores.parquet")
    assert table.num_rows == result["vocab_size"]
    assert sum(table.column("residue").to_pylist()) == result["residues"]


def test_residues_table_lists_the_top_residues(drifting_corpus, corpus_tokenizer, capsys):
    assert main(["residues", "--tokenizer", str(corpus_tokenizer), "--corpus", str(drifting_corpus),
                 "--r", "0.5", "--s", "3"]) == 0
    out = capsys.readouterr().out
    assert "residue_share" in out and "most frequent residues" in out


def test_residues_rejects_a_bad_min_count(drifting_corpus, corpus_tokenizer, capsys):
    assert main(["residues", "--tokenizer", str(corpus_tokenizer), "--corpus", str(drifting_corpus),
                 "--min-count", "many"]) == 2
    assert "min-count" in capsys.readouterr().err
