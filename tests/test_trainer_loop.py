"""``trainer.loop.Trainer`` against a real registry server: a revision published during training
is taken between two steps within the watch's delay; a tampered download is refused and training
goes on with the version it has; a resume from a checkpoint gives the losses of an uninterrupted
run."""

import json
import threading
import time
import uuid

import pytest

from registry.artifacts import LocalArtifactStore
from registry.client import RegistryClient
from registry.local_server import start_server
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import batches, read_corpus
from tokenizer_service.evolve import StreamSettings
from tokenizer_service.tedtok import TedTok
from trainer.loop import Trainer
from trainer.settings import TrainerSettings

TOKEN = "t" * 32
SETTINGS = TrainerSettings(batch_size=4, seq_len=32, retry_steps=5)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    process, url = start_server(root, env={"TOKMAINT_REGISTRY_TOKEN": TOKEN})
    yield url, root
    process.terminate()
    process.wait(timeout=30)


def _versions(drifting_corpus, vocab_size: int):
    """The corpus's texts, an initial tokenizer and Ted-Tok's revisions of it."""
    docs = read_corpus(drifting_corpus).documents
    initial = BPETokenizer.train([d.text for d in docs[:200]], vocab_size=vocab_size)
    tedtok = TedTok(initial, config=StreamSettings(step_docs=32, horizon_docs=320, interval_docs=64, warmup_docs=64,
                                                   batch_size=8, id_price=0.0, base_token_cost=0.0).tedtok_config())
    for texts in batches(docs, 32):
        tedtok.observe_texts(texts)
    return [d.text for d in docs], initial, tedtok.revisions


@pytest.fixture(scope="module")
def lineage_versions(drifting_corpus):
    return _versions(drifting_corpus, 300)


def _lineage(url, initial) -> str:
    name = f"train-{uuid.uuid4().hex[:8]}"
    RegistryClient(url, token=TOKEN).create(name, initial.to_json())
    return name


def _publish(url, name, revision) -> int:
    return RegistryClient(url, token=TOKEN).publish(name, revision.tokenizer.to_json(),
                                                    diff_json=revision.diff.to_json(), kind="tedtok")["number"]


def test_a_version_published_during_training_is_taken_within_the_watch(registry, lineage_versions):
    url, _ = registry
    texts, initial, revisions = lineage_versions
    name = _lineage(url, initial)
    with RegistryClient(url) as client:
        trainer = Trainer(registry=client, lineage=name, texts=texts, settings=SETTINGS)
        try:
            report = {}
            thread = threading.Thread(target=lambda: report.update(trainer.run(steps=300)))
            thread.start()
            time.sleep(1.0)
            published, at = _publish(url, name, revisions[0]), time.time()
            thread.join(timeout=300)
        finally:
            trainer.close()
    assert report["versions"][0] == 1 and report["versions"][-1] == published == 2
    (taken,) = report["taken"]
    assert taken["version"] == 2 and taken["time"] - at < 2.0  # the watch's delay and a step
    assert all(v == 1 for v in report["versions"][: taken["step"]])
    assert trainer.tokenizer.sha256 == revisions[0].tokenizer.sha256
    assert trainer.model.get_input_embeddings().weight.shape[0] == revisions[0].tokenizer.id_space
    assert all(loss == loss for loss in report["losses"])  # no NaN after the revision


def test_a_tampered_download_is_refused_and_training_goes_on(registry, drifting_corpus):
    url, root = registry
    texts, initial, revisions = _versions(drifting_corpus, 310)  # blobs no other test has had served
    name = _lineage(url, initial)
    with RegistryClient(url) as client:
        trainer = Trainer(registry=client, lineage=name, texts=texts, settings=SETTINGS)
        try:
            published = _publish(url, name, revisions[0])  # not downloaded yet: the server caches nothing
            artifact = LocalArtifactStore(root / "artifacts").path(revisions[0].tokenizer.sha256)
            artifact.write_bytes(artifact.read_bytes().replace(b'"merges"', b'"merges" ', 1))  # one byte more
            deadline = time.monotonic() + 10
            while trainer.latest.number != published:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            report = trainer.run(steps=12)
        finally:
            trainer.close()
    assert report["refused"] == [published] and set(report["versions"]) == {1}
    assert all(loss == loss for loss in report["losses"])


def test_a_resume_gives_the_losses_of_an_uninterrupted_run(registry, lineage_versions, tmp_path):
    url, _ = registry
    texts, initial, revisions = lineage_versions
    name = _lineage(url, initial)
    losses = {}
    with RegistryClient(url) as client:
        for run, steps in (("whole", [6]), ("resumed", [3, 3])):
            for k, n in enumerate(steps):
                trainer = Trainer(registry=client, lineage=name, texts=texts, settings=SETTINGS,
                                  checkpoint_dir=tmp_path / run)
                try:
                    losses.setdefault(run, []).extend(trainer.run(steps=n)["losses"])
                finally:
                    trainer.close()
    assert losses["resumed"] == losses["whole"]


def test_the_trainer_run_command(registry, lineage_versions, drifting_corpus, tmp_path, capsys):
    from tokmaint.cli import main

    url, _ = registry
    _, initial, _ = lineage_versions
    name = _lineage(url, initial)
    argv = ["trainer", "run", "--registry", url, "--lineage", name, "--data", str(drifting_corpus), "--steps", "4",
            "--batch-size", "4", "--checkpoint-dir", str(tmp_path), "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["steps"], first["version"], first["taken"]) == (4, 1, []) and first["last_loss"] > 0
    assert main(argv) == 0  # resumes from the checkpoint
    assert json.loads(capsys.readouterr().out)["steps"] == 8
