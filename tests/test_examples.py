"""The examples run as a user runs them (``python examples/X.py``, from the repository, on the shipped
sample) against a real registry server: each starts on the lineage's version, takes the one
published while it trains, and says the version it ended on; the Trainer's resumes from its
checkpoint."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lineages import create_lineage, publish_revision, tedtok_versions

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ("follow_loop.py", "hf_trainer.py")


@pytest.fixture(scope="module")
def lineage_versions(drifting_corpus):
    return tedtok_versions(drifting_corpus, 300)


def _run(example: str, *argv: str, publish=None) -> list[str]:
    """The example's log lines; ``publish()`` is called once it says it trains (a version published
    then is news to it)."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / example), *argv],
        cwd=ROOT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    said = []
    for line in process.stderr:
        said.append(line.rstrip("\n"))
        if publish is not None and "training" in line:
            publish()
            break
    said += process.communicate(timeout=300)[1].splitlines()
    assert process.returncode == 0, "\n".join(said)
    return said


# Each example's options for a short run: its own (the loop's), or TrainingArguments' (the Trainer's).
SHORT_RUN = {
    "follow_loop.py": "--steps 100 --batch-size 4 --seq-len 32 --out".split(),
    "hf_trainer.py": "--max_steps 100 --per_device_train_batch_size 4 --seq_len 32 --output_dir".split(),
}


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_example_takes_a_version_published_while_it_trains(example, registry_server, lineage_versions, tmp_path):
    url, _ = registry_server
    _, initial, revisions = lineage_versions
    name = create_lineage(url, initial)
    said = _run(
        example,
        *("--registry", url, "--lineage", name),
        *SHORT_RUN[example],
        str(tmp_path / "out"),
        publish=lambda: publish_revision(url, name, revisions[0]),
    )
    assert any(f"training {name} version 1" in line for line in said)
    assert any(line.startswith("tokmaint.trainer: trainer: took version 2 at step ") for line in said)
    assert f"ended on {name} version 2 after 100 steps" in said[-1]


def test_the_trainer_example_resumes_from_its_checkpoint(registry_server, lineage_versions, tmp_path):
    url, _ = registry_server
    _, initial, revisions = lineage_versions
    name = create_lineage(url, initial)
    common = ["--registry", url, "--lineage", name, "--save_steps", "4", "--output_dir", str(tmp_path)]
    common += ["--per_device_train_batch_size", "4", "--seq_len", "32"]
    _run("hf_trainer.py", *common, "--max_steps", "4")
    publish_revision(url, name, revisions[0])
    said = _run(
        "hf_trainer.py", *common, "--max_steps", "8", "--resume_from_checkpoint", str(tmp_path / "checkpoint-4")
    )
    assert any(f"training {name} version 1 from step 4" in line for line in said)
    assert f"ended on {name} version 2 after 8 steps" in said[-1]
    assert json.loads((tmp_path / "tokmaint.json").read_text())["version"] == 2  # save_model's, beside the weights
