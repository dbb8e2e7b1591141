"""``trainer.loop.Trainer`` against a real registry server: a revision published during training
is taken between two steps within the watch's delay; a tampered download is refused and training
goes on with the version it has; a resume from a checkpoint gives the losses of an uninterrupted
run. Against a real Kafka-protocol broker too: versions learnt from the ``tokenizer.revisions``
topic (the relay's events, sent twice), and documents read from the ``docs`` topic, resumed
exactly from the offsets in the checkpoint."""

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from registry.artifacts import LocalArtifactStore
from registry.client import RegistryClient
from registry.db import make_engine
from registry.relay import relay_once
from registry.store import Registry
from tests.support.lineages import create_lineage, grown, publish_revision, tedtok_versions
from tests.conftest import REGISTRY_TOKEN as TOKEN
from tests.support.polling import until
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import batches, read_corpus
from tokenizer_service.evolve import quick_revisions_config
from tokenizer_service.tedtok import TedTok
from trainer.data import CorpusTexts, TopicTexts, TrainingTexts
from trainer.checkpoint import read_checkpoint
from trainer.loop import NonFiniteLoss, Trainer
from trainer.config import TrainerSettings

# Two warm-up steps of a version's new rows, not 20: they are still warmed (test_new_rows is about it).
SETTINGS = TrainerSettings(batch_size=4, seq_len=32, retry_steps=5, warm_steps=2)


@pytest.fixture(scope="module")
def lineage_versions(drifting_corpus):
    return tedtok_versions(drifting_corpus, 300)


def _whole_and_resumed(
    client: RegistryClient, name: str, data: Callable[[], TrainingTexts], checkpoints: Path
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Six steps in one run ("whole"), and three then three more resumed from the checkpoint
    ("resumed"), each by a new Trainer on ``data()``: each run's losses, and its data's position
    at the end."""
    losses: dict[str, list[float]] = {}
    positions: dict[str, Any] = {}
    for run, steps in (("whole", [6]), ("resumed", [3, 3])):
        for n in steps:
            trainer = Trainer(
                registry=client, lineage=name, data=data(), settings=SETTINGS, checkpoint_dir=checkpoints / run
            )
            try:
                losses.setdefault(run, []).extend(trainer.run(steps=n)["losses"])
                positions[run] = trainer.position
            finally:
                trainer.close()
    return losses, positions


def _trainer_run(url: str, name: str, corpus: Path, *options: str) -> list[str]:
    """``tokmaint trainer run`` on the lineage ``name`` of the registry at ``url`` and on ``corpus``, then ``options``.

    >>> _trainer_run("http://r", "news", Path("c.jsonl"), "--json")
    ['trainer', 'run', '--registry', 'http://r', '--lineage', 'news', '--data', 'c.jsonl', '--json']
    """
    return ["trainer", "run", "--registry", url, "--lineage", name, "--data", str(corpus), *options]


def _published_during_training(trainer, url, name, revision, *, steps: int) -> tuple[dict, int, float]:
    """Train on a thread, ten steps a run, until a version is taken (at most ``steps`` steps),
    publishing ``revision`` a second in; the runs' report (their losses and versions one after
    the other), the version published and when. Runs of ten: the test needs no more steps than
    the version's coming takes, and a loaded machine takes longer."""
    report: dict = {"losses": [], "versions": []}

    def train() -> None:
        while not trainer.follower.taken and len(report["versions"]) < steps:
            ran = trainer.run(steps=10)
            report.update(ran, losses=report["losses"] + ran["losses"], versions=report["versions"] + ran["versions"])

    try:
        thread = threading.Thread(target=train)
        thread.start()
        time.sleep(1.0)
        published, at = publish_revision(url, name, revision), time.time()
        thread.join(timeout=300)
    finally:
        trainer.close()
    return report, published, at


def test_a_version_published_during_training_is_taken_within_the_watch(registry_server, lineage_versions, caplog):
    url, _ = registry_server
    texts, initial, revisions = lineage_versions
    name = create_lineage(url, initial)
    with RegistryClient(url) as client, caplog.at_level(logging.INFO, logger="tokmaint.trainer"):
        trainer = Trainer(registry=client, lineage=name, data=CorpusTexts(texts), settings=SETTINGS)
        report, published, at = _published_during_training(trainer, url, name, revisions[0], steps=300)
    said = [record.getMessage() for record in caplog.records]
    assert said[0] == f"trainer: training {name} version 1 on {trainer.device} from step 0"
    assert said[1].startswith(f"trainer: took version 2 at step {report['taken'][0]['step']} (")
    assert report["versions"][0] == 1 and report["versions"][-1] == published == 2
    (taken,) = report["taken"]
    # Begun within the watch's delay and a step (then applied, and its new rows warmed up, in
    # ``seconds``: compute, which a loaded machine stretches).
    assert taken["version"] == 2 and taken["time"] - taken["seconds"] - at < 2.0 and taken["seconds"] > 0
    assert all(v == 1 for v in report["versions"][: taken["step"]])
    assert trainer.tokenizer.sha256 == revisions[0].tokenizer.sha256
    assert trainer.model.get_input_embeddings().weight.shape[0] == revisions[0].tokenizer.id_space
    assert all(loss == loss for loss in report["losses"])  # no NaN after the revision


def test_a_version_that_grows_the_vocabulary_is_taken_mid_run_and_training_goes_on(registry_server, lineage_versions):
    """A version with more rows than the model comes while a run holds its last step's loss
    (and graph): the model, its tied output and AdamW grow, and the run trains on with it."""
    url, _ = registry_server
    texts, initial, _ = lineage_versions
    name = create_lineage(url, initial)
    larger = grown(initial, texts[-1])
    with RegistryClient(url) as client:
        trainer = Trainer(registry=client, lineage=name, data=CorpusTexts(texts), settings=SETTINGS)
        reports: list[dict] = []
        thread = threading.Thread(target=lambda: reports.append(trainer.run(steps=400)))
        try:
            thread.start()
            until(lambda: trainer.step >= 2, "two steps on version 1", 60)
            RegistryClient(url, token=TOKEN).publish(name, larger.to_json(), kind="tedtok")
            thread.join(timeout=300)
        finally:
            trainer.close()
    (report,) = reports
    (taken,) = report["taken"]
    assert 2 <= taken["step"] < 400 and report["versions"][-1] == 2 and len(report["losses"]) == 400
    assert trainer.model.get_input_embeddings().weight.shape[0] == larger.id_space == initial.id_space + 1
    assert trainer.model.lm_head.weight is trainer.model.get_input_embeddings().weight
    assert all(loss == loss for loss in report["losses"])


def test_a_tampered_download_is_refused_and_training_goes_on(registry_server, drifting_corpus):
    url, root = registry_server
    texts, initial, revisions = tedtok_versions(drifting_corpus, 310)  # blobs no other test has had served
    name = create_lineage(url, initial)
    with RegistryClient(url) as client:
        trainer = Trainer(registry=client, lineage=name, data=CorpusTexts(texts), settings=SETTINGS)
        try:
            published = publish_revision(url, name, revisions[0])  # not downloaded yet: the server caches nothing
            artifact = LocalArtifactStore(root / "artifacts").path(revisions[0].tokenizer.sha256)
            artifact.write_bytes(artifact.read_bytes().replace(b'"merges"', b'"merges" ', 1))  # one byte more
            deadline = time.monotonic() + 10
            while not trainer.follower.fetched(published):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            report = trainer.run(steps=12)
        finally:
            trainer.close()
    assert report["refused"] == [published] and set(report["versions"]) == {1}
    assert all(loss == loss for loss in report["losses"])


def test_a_loss_that_is_not_finite_stops_the_run_naming_the_step_and_the_version(
    registry_server, lineage_versions, tmp_path
):
    """A model that diverged (a NaN weight here) stops at its first NaN loss, before the
    optimizer spreads it, and its last checkpoint is the good one before it."""
    url, _ = registry_server
    texts, initial, _ = lineage_versions
    name = create_lineage(url, initial)
    settings = SETTINGS.model_copy(update={"checkpoint_every": 2})
    with RegistryClient(url) as client:
        trainer = Trainer(
            registry=client, lineage=name, data=CorpusTexts(texts), settings=settings, checkpoint_dir=tmp_path
        )
        try:
            trainer.run(steps=2)
            trainer.model.transformer.ln_f.weight.data[0] = float("nan")
            with pytest.raises(
                NonFiniteLoss, match=rf"the loss at step 3 on {name} version 1 is nan: the model diverged"
            ):
                trainer.run(steps=3)
        finally:
            trainer.close()
    assert read_checkpoint(tmp_path / "checkpoint.pt")["position"]["step"] == 2


def test_a_resume_gives_the_losses_of_an_uninterrupted_run(registry_server, lineage_versions, tmp_path):
    url, _ = registry_server
    texts, initial, revisions = lineage_versions
    name = create_lineage(url, initial)
    with RegistryClient(url) as client:
        losses, _ = _whole_and_resumed(client, name, lambda: CorpusTexts(texts), tmp_path)
    assert losses["resumed"] == losses["whole"]


def _scraped(port: int, lineage: str) -> dict[str, float]:
    """The lineage's samples at ``/metrics`` on ``port``, by name."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    families = text_string_to_metric_families(httpx.get(f"http://127.0.0.1:{port}/metrics").text)
    return {s.name: s.value for family in families for s in family.samples if s.labels.get("lineage") == lineage}


def test_the_trainer_run_command(registry_server, lineage_versions, drifting_corpus, tmp_path, capsys):
    """``trainer run`` trains, writes its report, resumes up to ``--steps`` in all, and serves its
    steps, version and seconds without the registry at ``--metrics-port``."""
    from registry.local_server import free_port
    from tokmaint.cli import main

    url, _ = registry_server
    _, initial, _ = lineage_versions
    name = create_lineage(url, initial)
    options = ["--steps", "4", "--batch-size", "4", "--checkpoint-dir", str(tmp_path), "--json"]
    argv = _trainer_run(url, name, drifting_corpus, *options)
    port = free_port()
    assert main(argv + ["--report", str(tmp_path / "report.json"), "--metrics-port", str(port)]) == 0
    # Served from a thread of its own, which the command leaves behind in this process: the run's last figures.
    assert _scraped(port, name) == {
        "tokmaint_trainer_steps": 4,
        "tokmaint_trainer_version": 1,
        "tokmaint_registry_away_seconds": 0,
    }
    first = json.loads(capsys.readouterr().out)
    whole = json.loads((tmp_path / "report.json").read_text())
    assert len(whole["losses"]) == 4 and whole["losses"][-1] == first["last_loss"] and whole["versions"] == [1] * 4
    assert (first["steps"], first["version"], first["taken"]) == (4, 1, []) and first["last_loss"] > 0
    assert main(argv) == 0  # the same command again: --steps is the total, reached already
    again = json.loads(capsys.readouterr().out)
    assert (again["steps"], again["last_loss"]) == (4, None)
    more = list(argv)
    more[more.index("--steps") + 1] = "8"
    assert main(more) == 0  # resumes from the checkpoint up to 8 in all
    assert json.loads(capsys.readouterr().out)["steps"] == 8


def test_a_checkpoint_resumes_only_on_its_own_lineage_and_version(
    registry_server, lineage_versions, drifting_corpus, tmp_path, capsys
):
    """``trainer run`` refuses, in one line and before it touches the checkpoint, another lineage's
    checkpoint and one whose version the registry holds with other contents."""
    import torch

    from tokmaint.cli import main

    url, _ = registry_server
    _, initial, revisions = lineage_versions
    name, other = create_lineage(url, initial), create_lineage(url, revisions[0].tokenizer)
    checkpoint = tmp_path / "checkpoint.pt"
    assert main(_trainer_run(url, name, drifting_corpus, "--steps", "2", "--checkpoint-dir", str(tmp_path))) == 0
    saved = checkpoint.read_bytes()
    capsys.readouterr()
    assert main(_trainer_run(url, other, drifting_corpus, "--steps", "4", "--checkpoint-dir", str(tmp_path))) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"tokmaint: error: {checkpoint} was trained on lineage {name!r}, not {other!r}: resume it on {name!r}, "
        f"or train {other!r} in another checkpoint folder"
    )
    assert checkpoint.read_bytes() == saved
    data = torch.load(checkpoint, weights_only=True)
    data["tokenizer"]["sha256"] = "0" * 64  # what a registry made anew holds under the same number
    torch.save(data, checkpoint)
    saved = checkpoint.read_bytes()
    assert main(_trainer_run(url, name, drifting_corpus, "--steps", "4", "--checkpoint-dir", str(tmp_path))) == 2
    err = capsys.readouterr().err.strip()
    assert f"was trained with tokenizer {name} version 1 (sha256 000000000000), not {name} version 1" in err
    assert "\n" not in err and checkpoint.read_bytes() == saved


def test_a_trainer_restarted_while_the_registry_is_away_resumes_from_its_checkpoint(lineage_versions, tmp_path, caplog):
    """A trainer killed and started again during an outage resumes on its checkpoint's own copy of
    its version and trains on."""
    from registry.local_server import start_server

    texts, initial, _ = lineage_versions
    registry, url = start_server(tmp_path / "registry", env={"TOKMAINT_REGISTRY_TOKEN": TOKEN})

    def trained(steps: int) -> dict[str, Any]:
        trainer = Trainer(
            registry=RegistryClient(url),
            lineage=name,
            data=CorpusTexts(texts),
            settings=SETTINGS,
            checkpoint_dir=tmp_path / "run",
        )
        try:
            return trainer.run(steps=steps)
        finally:
            trainer.close()

    try:
        name = create_lineage(url, initial)
        trained(2)
    finally:
        registry.kill()
        registry.wait(timeout=30)
    with caplog.at_level(logging.WARNING, logger="tokmaint"):
        report = trained(3)
    assert report["steps"] == 5 and report["versions"] == [1] * 3 and report["registry_away_seconds"] > 0
    said = [r.getMessage() for r in caplog.records]
    assert f"trainer: the registry is away: resuming {name} version 1 from the checkpoint's copy of it" in said


def test_a_trainer_started_while_the_registry_is_away_waits_for_it_and_trains(lineage_versions, tmp_path, caplog):
    """A trainer with no checkpoint started while the registry is stopped waits for it, saying
    once that it is away and once that it is back, and trains once it is started again on the
    same port and database; its report counts the wait, and its ``/metrics`` shows it meanwhile."""
    from registry.client import Outages
    from registry.local_server import free_port, start_server
    from trainer.metrics import TrainerMetrics

    texts, initial, _ = lineage_versions
    root, env, port = tmp_path / "registry", {"TOKMAINT_REGISTRY_TOKEN": TOKEN}, free_port()
    registry, url = start_server(root, env=env, port=port)
    try:
        name = create_lineage(url, initial)
    finally:
        registry.kill()
        registry.wait(timeout=30)
    outages, metrics_port = Outages(url, name), free_port()
    metrics = TrainerMetrics.create(name, outages)
    metrics.serve(metrics_port, host="127.0.0.1")
    with caplog.at_level(logging.WARNING, logger="tokmaint"), ThreadPoolExecutor(1) as pool:
        starting = pool.submit(
            Trainer,
            registry=RegistryClient(url),
            lineage=name,
            data=CorpusTexts(texts),
            settings=SETTINGS,
            outages=outages,
        )
        time.sleep(2.0)
        assert not starting.done()  # waiting for the registry
        assert _scraped(metrics_port, name)["tokmaint_registry_away_seconds"] > 1.0  # and /metrics says so
        registry, _ = start_server(root, env=env, port=port)
        try:
            trainer = starting.result(timeout=60)
            metrics.follow(trainer)
            try:
                report = trainer.run(steps=2)
            finally:
                trainer.close()
        finally:
            registry.terminate()
            registry.wait(timeout=30)
    assert report["steps"] == 2 and report["versions"] == [1, 1] and report["registry_away_seconds"] > 2.0
    scraped = _scraped(metrics_port, name)
    assert (scraped["tokmaint_trainer_steps"], scraped["tokmaint_trainer_version"]) == (2, 1)
    assert scraped["tokmaint_registry_away_seconds"] == pytest.approx(report["registry_away_seconds"], abs=0.5)
    said = [r.getMessage() for r in caplog.records]
    assert sum(f"{name} waits for its latest version" in m for m in said) == 1, said
    assert sum("is back after" in m for m in said) == 1, said


class SentTwice:
    """The relay's producer, sending every event twice (as a relay restarted before marking does)."""

    def __init__(self, producer) -> None:
        self.producer = producer

    def send_all(self, topic, records):
        records = list(records)
        return self.producer.send_all(topic, records + records)


def test_versions_learnt_from_the_revision_events_topic_once_each(registry_server, lineage_versions, broker):
    from pipeline.kafka import Producer

    url, root = registry_server
    texts, initial, revisions = lineage_versions
    name = create_lineage(url, initial)
    topic = f"tokenizer.revisions.{name}"
    with RegistryClient(url) as client:
        trainer = Trainer(
            registry=client, lineage=name, data=CorpusTexts(texts), settings=SETTINGS, events=(broker, topic)
        )
        try:
            published = [publish_revision(url, name, r) for r in revisions[:2]]
            outbox = Registry(make_engine(f"sqlite:///{root / 'registry.db'}"), LocalArtifactStore(root / "artifacts"))
            producer = Producer(broker)
            relay_once(outbox, SentTwice(producer), topic=topic)  # this test's events and others' pending ones
            producer.close()
            deadline = time.monotonic() + 30
            while trainer.latest.number != published[-1]:
                assert time.monotonic() < deadline, "the events never came"
                time.sleep(0.05)
            # Downloaded ahead before the steps: six steps of a tiny model may outrun the download.
            while not trainer.follower.fetched(published[-1]):
                assert time.monotonic() < deadline, "version 3 was never downloaded"
                time.sleep(0.05)
            report = trainer.run(steps=6)
        finally:
            trainer.close()
    events = trainer.latest.events
    assert sorted(e["version"] for e in events) == [1, 2, 3] and trainer.latest.duplicates == 3
    # One composed diff, applied at the first step after it was downloaded (a step waits for none).
    assert [t["version"] for t in report["taken"]] == [3] and report["versions"][-1] == 3
    assert trainer.tokenizer.sha256 == revisions[1].tokenizer.sha256


def test_training_on_the_docs_topic_resumes_at_its_offsets(registry_server, lineage_versions, broker, tmp_path):
    from pipeline.config import PipelineSettings
    from tests.conftest import produce

    url, _ = registry_server
    texts, initial, _ = lineage_versions
    name = create_lineage(url, initial)
    settings = PipelineSettings(bootstrap=broker, docs_topic=f"docs.{name}")
    produce(
        broker,
        settings.docs_topic,
        [(b"not a document", b"bad")]
        + [  # the bad one at the head of its partition
            (
                json.dumps(
                    {"id": f"d{k}", "text": text, "ts": f"2024-01-01T00:00:{k:02d}Z", "source": "test"}
                ).encode(),
                f"d{k}".encode(),
            )
            for k, text in enumerate(texts[:40])
        ],
    )
    with RegistryClient(url) as client:
        losses, positions = _whole_and_resumed(client, name, lambda: TopicTexts(settings), tmp_path)
    assert losses["resumed"] == losses["whole"] and len(losses["whole"]) == 6
    assert sum(positions["whole"].values()) == 6 * SETTINGS.batch_size + 1  # the bad record passed over


@pytest.mark.parametrize("source", [[], ["--data", "x.jsonl", "--topic", "docs"]])
def test_the_trainer_trains_on_one_source(source, capsys):
    from tokmaint.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["trainer", "run", "--registry", "http://127.0.0.1:9", "--lineage", "x", *source])
    assert exc.value.code == 2 and "one of --data PATH or --topic NAME" in capsys.readouterr().err


def test_bits_per_byte_on_held_out_text_across_the_versions_taken(registry_server, drifting_corpus):
    """A version with <|endoftext|>: the trainer starts each text from it and scores the held-out
    texts in bits per byte every --eval-every steps and at the end, whatever version it reads
    with; the figure is the byte-level model's (trainer.byte_level) on the same texts."""
    from trainer.byte_level import ByteLevelModel, evaluate_texts

    url, _ = registry_server
    docs = read_corpus(drifting_corpus).documents
    initial = BPETokenizer.train([d.text for d in docs[:200]], vocab_size=300, special_tokens=["<|endoftext|>"])
    tedtok = TedTok(
        initial,
        config=quick_revisions_config(),
    )
    for texts in batches(docs, 32):
        tedtok.observe_texts(texts)
    name = create_lineage(url, initial)
    settings = TrainerSettings(batch_size=4, seq_len=32, eval_every=3, eval_docs=4, eval_bytes=64)
    held_out = [d.text for d in docs[-4:]]
    with RegistryClient(url) as client:
        trainer = Trainer(
            registry=client,
            lineage=name,
            data=CorpusTexts([d.text for d in docs[:-4]]),
            settings=settings,
            held_out=held_out,
        )
        try:
            first = trainer.run(steps=3)
            publish_revision(url, name, tedtok.revisions[0])
            deadline = time.monotonic() + 10
            while not trainer.follower.fetched(2) and time.monotonic() < deadline:
                time.sleep(0.05)
            second = trainer.run(steps=4)
            assert [(e["step"], e["version"]) for e in first["evaluations"]] == [(3, 1)]
            assert [(e["step"], e["version"]) for e in second["evaluations"]][-2:] == [(6, 2), (7, 2)]
            last = second["evaluations"][-1]
            cut = [t.encode()[:64].decode(errors="ignore") for t in held_out]
            model = ByteLevelModel(trainer.model, trainer.tokenizer, bos_token_id=initial.vocab["<|endoftext|>"])
            assert last["bits_per_byte"] == pytest.approx(evaluate_texts([model], cut)["bits_per_byte"])
            assert second["bits_per_byte"] == last["bits_per_byte"] and 0 < last["bits_per_byte"] < 16
        finally:
            trainer.close()


def test_a_trainer_following_the_hub_protocol_takes_a_new_version(registry_server, lineage_versions, tmp_path):
    """With trainer.hub.HubVersions (huggingface_hub at the registry's URL, none of its own API)
    the trainer starts on the latest version and takes one published during training."""
    from trainer.hub import HubVersions

    url, _ = registry_server
    texts, initial, revisions = lineage_versions
    name = create_lineage(url, initial)
    versions = HubVersions(url, cache_dir=str(tmp_path / "hf"))
    trainer = Trainer(registry=versions, lineage=name, data=CorpusTexts(texts), settings=SETTINGS)
    report, published, at = _published_during_training(trainer, url, name, revisions[0], steps=1000)
    (taken,) = report["taken"]
    assert report["versions"][0] == 1 and taken["version"] == published == 2
    assert taken["time"] - taken["seconds"] - at < 3.0  # begun within the poll's second and a step
    assert trainer.tokenizer.sha256 == revisions[0].tokenizer.sha256
    assert trainer.model.get_input_embeddings().weight.shape[0] == revisions[0].tokenizer.id_space
    own = RegistryClient(url).composed_diff(name, 1, 2)  # the version's own diff: the same ids, another config
    assert versions.composed_diff(name, 1, 2).entries == own.entries
    assert (tmp_path / "hf" / f"models--{name}").is_dir()  # read through the Hub client's own cache


def test_the_trainer_run_command_with_hub(
    registry_server, lineage_versions, drifting_corpus, tmp_path, capsys, monkeypatch
):
    from huggingface_hub import constants

    from tokmaint.cli import main

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    url, _ = registry_server
    _, initial, revisions = lineage_versions
    name = create_lineage(url, initial)
    publish_revision(url, name, revisions[0])
    options = ["--hub", "--steps", "3", "--batch-size", "4", "--eval-every", "0", "--json"]
    assert main(_trainer_run(url, name, drifting_corpus, *options)) == 0
    ran = json.loads(capsys.readouterr().out)
    assert (ran["steps"], ran["version"]) == (3, 2)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.delenv("TOKMAINT_REGISTRY_URL", raising=False)
    with pytest.raises(SystemExit):
        main(["trainer", "run", "--hub", "--lineage", name, "--data", str(drifting_corpus)])
    assert "--hub reads from --registry, HF_ENDPOINT or TOKMAINT_REGISTRY_URL" in capsys.readouterr().err


def test_a_version_published_while_the_stream_is_idle_is_taken(registry_server, lineage_versions, broker):
    """The topic read to its end, the trainer waits for documents; a version published then is
    taken while it waits (a finite stream's trainer would otherwise never see it)."""
    from pipeline.config import PipelineSettings
    from tests.conftest import produce

    url, _ = registry_server
    texts, initial, revisions = lineage_versions
    name = create_lineage(url, initial)
    settings = PipelineSettings(bootstrap=broker, docs_topic=f"docs.{name}")
    documents = [
        (json.dumps({"id": f"d{k}", "text": text, "ts": f"2024-01-01T00:00:{k:02d}Z"}).encode(), f"d{k}".encode())
        for k, text in enumerate(texts[:12])
    ]
    produce(broker, settings.docs_topic, documents[:8])
    with RegistryClient(url) as client:
        trainer = Trainer(
            registry=client,
            lineage=name,
            data=TopicTexts(settings),
            settings=TrainerSettings(batch_size=4, seq_len=32, eval_every=0),
        )
        try:
            report = {}
            thread = threading.Thread(target=lambda: report.update(trainer.run(steps=3)))
            thread.start()
            until(lambda: trainer.step >= 2, "the trainer did not do its two steps", seconds=120)  # the third waits
            publish_revision(url, name, revisions[0])
            deadline = time.monotonic() + 20
            while trainer.version == 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            taken_while_waiting = trainer.version
            produce(broker, settings.docs_topic, documents[8:])
            thread.join(timeout=60)
        finally:
            trainer.close()
    assert taken_while_waiting == 2 and report["taken"][0]["step"] == 2
    assert report["versions"] == [1, 1, 2]
