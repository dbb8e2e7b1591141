"""tokenizer_service/bench/residues.py: ``bench residues``."""

import pytest

from tests.support.cli import run_json
from tokmaint.cli import main


def test_bench_residues_audits_each_family_in_a_process_of_its_own(
    drifting_corpus, byte_tokenizer, sp_tokenizer, tmp_path, capsys
):
    paths = []
    for name, tokenizer in (("byte", byte_tokenizer), ("sp", sp_tokenizer)):
        paths += ["--tokenizer", str(tmp_path / f"{name}.json")]
        tokenizer.save(tmp_path / f"{name}.json")
    result = run_json(capsys, "bench", "residues", *paths, "--corpus", str(drifting_corpus))
    assert result["documents"] == 600 and [r["tokenizer"] for r in result["tokenizers"]] == paths[1::2]
    byte, sp = result["tokenizers"]
    assert (byte["family"], byte["kind"], byte["thresholds"]) == ("byte-level BPE", "classic", {"r": 0.15, "s": 4.0})
    assert 0 <= byte["residue_share_r025"] - byte["residue_share"] <= 1  # r = 0.25 flags at least as many
    assert sp["family"] == "SentencePiece-style BPE with byte fallback (Prepend + Replace)"
    for row in (byte, sp):
        assert row["lossless"] and row["export_loads"] and row["export_agreement"] >= 0.99
        assert row["paper"] is None and row["kind_from"] == "file" and row["peak_rss_mb"] > 0
        assert row["residues"] == round(row["residue_share"] * row["scope_size"])
    with pytest.raises(SystemExit) as usage:
        main(["bench", "residues", *paths[:2], *paths[:2], "--corpus", str(drifting_corpus)])
    assert usage.value.code == 2 and "the same tokenizer is given twice" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["bench", "residues", "--tokenizer", str(bad), "--corpus", str(drifting_corpus)]) == 2
    assert "bad.json: invalid tokenizer: model: must be an object" in capsys.readouterr().err
