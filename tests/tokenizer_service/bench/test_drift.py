"""tokenizer_service/bench/drift.py: ``bench drift``."""

import json

from tests.support.cli import run


def test_drift_gap_is_null_when_old_and_new_compress_alike(tmp_path, capsys):
    path = tmp_path / "spaces.jsonl"
    path.write_text("\n".join(json.dumps({"text": " " * (1 + i % 3)}) for i in range(200)))
    code, out, _ = run(
        ["bench", "drift", "--corpus", str(path), "--vocab-size", "300", "--held-out", "10", "--json"], capsys
    )
    [row] = json.loads(out)["rows"]
    assert code == 0 and row["bpt_old"] == row["bpt_new"] and row["gap_closed"] is None
