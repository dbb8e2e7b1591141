"""tokenizer_service/evolve.py: ``tokmaint evolve`` writes every version."""

import json

from tokenizers import Tokenizer

from schemas.revision import RevisionDiff
from tests.support.cli import EVOLVE_OPTIONS, run_json


def test_evolve_writes_valid_versions(drifting_corpus, tmp_path, capsys):
    out = tmp_path / "versions"
    result = run_json(
        capsys,
        "evolve",
        "--corpus",
        str(drifting_corpus),
        "--out",
        str(out),
        *EVOLVE_OPTIONS,
    )
    versions = sorted(p.name for p in out.glob("v*"))
    assert len(versions) == result["versions"] > 1
    assert not list(out.glob(".tokmaint-staging-*"))  # no staging leftovers
    for name in versions[1:]:
        diff = RevisionDiff.from_dict(json.loads((out / name / "diff.json").read_text()))
        assert Tokenizer.from_file(str(out / name / "tokenizer.json"))
        assert diff.version == int(name[1:]) and diff.entries
    steps = (out / "steps.jsonl").read_text().splitlines()
    assert len(steps) == result["steps"] == 42
    assert result["bytes_per_token"]["last_step"] > result["bytes_per_token"]["first_step"]
