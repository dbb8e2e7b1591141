"""``tokmaint stats hypertokens`` against a real registry and broker: the runs LZW forms in the
most of the stream's documents, read from the docs topic or from a corpus, counted as the core
counts them, with whether each is a token of the lineage's version already."""

import json
import uuid
from collections import Counter

import pytest

from registry.client import RegistryClient
from tests.conftest import REGISTRY_TOKEN as TOKEN
from tests.support.cli import run
from tokenizer_service.corpus import read_corpus
from tokenizer_service.lzw import LZW, hypertoken_counts
from tokmaint.cli import main


@pytest.fixture(scope="module")
def registry(registry_server):
    return registry_server[0]


def test_stats_hypertokens_from_the_topic_and_from_a_corpus(registry, broker, drifting_corpus, monkeypatch, capsys):
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", TOKEN)
    lineage, topic = f"hyper-{uuid.uuid4().hex[:8]}", f"docs.hyper.{uuid.uuid4().hex[:6]}"
    assert (
        main(
            [
                "registry",
                "create",
                lineage,
                "--registry",
                registry,
                "--train",
                str(drifting_corpus),
                "--train-docs",
                "100",
                "--vocab-size",
                "320",
            ]
        )
        == 0
    )
    assert main(["ingest", str(drifting_corpus), "--bootstrap", broker, "--topic", topic]) == 0
    capsys.readouterr()

    def stats(*args: str) -> dict:
        assert (
            main(["stats", "hypertokens", "--registry", registry, "--lineage", lineage, "--top", "15", *args, "--json"])
            == 0
        )
        return json.loads(capsys.readouterr().out)

    from_topic = stats("--bootstrap", broker, "--topic", topic)
    from_corpus = stats("--corpus", str(drifting_corpus))
    texts = read_corpus(drifting_corpus).texts
    tokenizer = RegistryClient(registry).tokenizer(lineage, "latest")
    counts = hypertoken_counts(tokenizer.encode_batch(texts), LZW(base_size=tokenizer.id_space, max_merge=3))
    by_text = Counter({tokenizer.decode(list(run)): n for run, n in counts.items()})
    for shown in (from_topic, from_corpus):
        assert (shown["version"], shown["documents"], shown["contexts"], shown["max_merge"]) == (1, 600, 600, 3)
        listed = shown["hypertokens"]
        assert len(listed) == 15 and all(h["contexts"] == by_text[h["text"]] for h in listed)
        assert [h["contexts"] for h in listed] == sorted(by_text.values(), reverse=True)[:15]
        assert shown["already_tokens"] == sum(h["is_token"] for h in listed)
    newest = stats("--corpus", str(drifting_corpus), "--documents", "100", "--max-merge", "2")
    assert (newest["documents"], newest["max_merge"]) == (100, 2)
    assert all(len(tokenizer.encode(h["text"])) == 2 for h in newest["hypertokens"])


def test_pipeline_flink_refuses_a_job_without_windows_or_with_a_negative_lateness(capsys):
    """The Flink job's steps are windows of event time: no --step-seconds is a usage error (exit
    2, one line), before any cluster is asked; so is a lateness that is not a number ≥ 0."""
    code, _, err = run(
        ["pipeline", "flink", "--lineage", "git", "--flink-master", "127.0.0.1:1", "--registry", "http://127.0.0.1:1"],
        capsys,
    )
    assert code == 2 and "--step-seconds is required" in err and "Traceback" not in err
    code, _, err = run(
        [
            "pipeline",
            "flink",
            "--lineage",
            "git",
            "--flink-master",
            "127.0.0.1:1",
            "--step-seconds",
            "60",
            "--max-lateness-seconds",
            "-1",
        ],
        capsys,
    )
    assert code == 2 and "--max-lateness-seconds" in err and "Traceback" not in err
