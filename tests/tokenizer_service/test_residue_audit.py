"""tokenizer_service/residue_audit.py: ``tokmaint residues``, its outputs and report."""

import json
from pathlib import Path

from tokenizers import Tokenizer

from schemas.revision import RevisionDiff
from tests.support.cli import run_json
from tokmaint.cli import main


def _residues(tokenizer: Path | str, corpus: Path | str, *options: str) -> list[str]:
    """``tokmaint residues`` of ``tokenizer`` over ``corpus`` at r 0.5 and s 3, with ``options``.

    >>> _residues("t.json", "c.jsonl", "--out", "o")
    ['residues', '--tokenizer', 't.json', '--corpus', 'c.jsonl', '--r', '0.5', '--s', '3', '--out', 'o']
    """
    return ["residues", "--tokenizer", str(tokenizer), "--corpus", str(corpus), "--r", "0.5", "--s", "3", *options]


def test_residues_writes_outputs_that_agree_with_the_report(drifting_corpus, corpus_tokenizer, tmp_path, capsys):
    import pyarrow.parquet as pq

    out = tmp_path / "lite"
    result = run_json(capsys, *_residues(corpus_tokenizer, drifting_corpus, "--log-base", "2", "--out", str(out)))
    source = json.loads(corpus_tokenizer.read_text())["model"]["vocab"]
    table = pq.read_table(out / "scores.parquet").to_pydict()
    assert table["id"] == sorted(source.values()) and result["vocab_size"] == len(source)
    # The scope is every all-ASCII token; tokenizers' own decoder says which those are.
    hf = Tokenizer.from_file(str(corpus_tokenizer))
    in_scope = [hf.decode([i]).isascii() for i in table["id"]]
    assert result["scope_size"] == sum(in_scope) > 0
    merged = {t for t in source if len(t) > 1}  # a byte-level tokenizer's base tokens are single symbols
    unseen = sum(
        s and t in merged and f1 == 0 and f2 == 0
        for s, t, f1, f2 in zip(in_scope, table["token"], table["f1"], table["f2"])
    )
    assert result["unseen"] == unseen
    flagged = [
        r and s and f1 / (f1 + f2) <= 0.5 and e <= 3
        for r, s, f1, f2, e in zip(table["residue"], in_scope, table["f1"], table["f2"], table["entropy"])
    ]
    assert sum(table["residue"]) == sum(flagged) == result["residues"] > 0
    assert result["tokens"]["split"] >= result["tokens"]["remerged"] >= result["tokens"]["original"]
    assert result["lossless"] is True and 0.99 <= result["export_agreement"] <= 1
    assert result["thresholds"] == {"r": 0.5, "s": 3.0, "log_base": 2.0, "min_count": 0}
    diff = RevisionDiff.from_dict(json.loads((out / "diff.json").read_text()))
    assert sorted(e.old_token for e in diff.entries) == sorted(
        t for t, removed in zip(table["token"], table["removed"]) if removed
    )
    assert len(diff.entries) == result["export"]["removed"]
    exported = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert exported.get_vocab_size() == result["export"]["vocab_size"] == len(source) - len(diff.entries)


def test_residues_table_lists_the_top_residues(drifting_corpus, corpus_tokenizer, capsys):
    assert main(_residues(corpus_tokenizer, drifting_corpus)) == 0
    out = capsys.readouterr().out
    assert "residue_share" in out and "most frequent residues" in out
