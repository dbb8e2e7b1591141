"""``trainer.callbacks.TokmaintCallback`` in a real ``transformers.Trainer`` (a tiny GPT-2 on the
CPU) against a real registry server: versions published during training are applied between two
steps, every forward reads its batch in the version the model has then (a batch collated before
a version came is encoded again); the Trainer's checkpoint resumes on its version; the folder
``Trainer.save_model`` writes loads with ``AutoModelForCausalLM`` and ``AutoTokenizer`` and
encodes as the version."""

import math
import time

import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    EarlyStoppingCallback,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from registry.client import RegistryClient
from tests.conftest import REGISTRY_TOKEN as TOKEN
from tests.support.lineages import create_lineage, grown, tedtok_versions
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import TokmaintError
from trainer.callbacks import BATCH_KEY, CheckpointFolder, TokmaintCallback, label_count
from trainer.export import load_model
from trainer.follow import token_batch
from trainer.loop import tiny_gpt2_config

SEQ_LEN = 64
STEPS = 8


@pytest.fixture(scope="module")
def lineage_versions(drifting_corpus):
    """The texts, and versions 1 to 4 with a token to start texts from (the batches and the saved
    folder's config have it): 2 and 4 add a row, 3 frees it (the model keeps it)."""
    texts, initial, revisions = tedtok_versions(drifting_corpus, 300, special_tokens=("<|endoftext|>",))
    versions = {
        1: initial,
        2: grown(revisions[0].tokenizer, texts[-1]),
        3: revisions[1].tokenizer,
        4: grown(revisions[1].tokenizer, texts[-1]),
    }
    assert [v.id_space for v in versions.values()] == [300, 301, 300, 301]
    return texts[300:], versions


class Recorder(TrainerCallback):
    """Each forward's step, the version its batch was collated with, the model's version, its texts
    and the ids and labels the model read; the version and embeddings at the start of training."""

    def __init__(self, callback: TokmaintCallback) -> None:
        self.callback, self.forwards, self.step, self.began = callback, [], None, None

    def on_train_begin(self, args, state, control, *, model, **kwargs):
        self.began = (self.callback.version, model.get_input_embeddings().weight.detach().clone())
        self.hooks = [
            model.register_forward_pre_hook(self._collated, with_kwargs=True, prepend=True),  # before the
            model.register_forward_hook(self._read, with_kwargs=True),
        ]  # callback's

    def on_train_end(self, args, state, control, **kwargs):
        for hook in self.hooks:
            hook.remove()

    def on_step_begin(self, args, state, control, **kwargs):
        self.step = state.global_step

    def _collated(self, module, args, kwargs):
        self.forwards.append(
            {"step": self.step, "collated": kwargs[BATCH_KEY].version, "texts": kwargs[BATCH_KEY].texts}
        )

    def _read(self, module, args, kwargs, output):
        self.forwards[-1].update(
            version=self.callback.version,
            input_ids=kwargs["input_ids"],
            labels=kwargs["labels"],
            num_items=kwargs["num_items_in_batch"],
        )


class PublishAfter(TrainerCallback):
    """Publish a version after each given step, and wait until the callback has downloaded it."""

    def __init__(self, callback: TokmaintCallback, url: str, plan: dict[int, BPETokenizer]) -> None:
        self.callback, self.url, self.plan = callback, url, plan

    def on_step_end(self, args, state, control, **kwargs):
        if (version := self.plan.get(state.global_step)) is None:
            return
        published = RegistryClient(self.url, token=TOKEN).publish(
            self.callback.follower.lineage, version.to_json(), kind="tedtok"
        )
        deadline = time.monotonic() + 10
        while not self.callback.follower.fetched(published.number):
            assert time.monotonic() < deadline, "the version was never downloaded"
            time.sleep(0.02)


def _trainer(
    callback: TokmaintCallback,
    texts: list[str],
    out,
    *extra: TrainerCallback,
    eval_texts: list[str] | None = None,
    **arguments,
) -> Trainer:
    """A Trainer of a tiny GPT-2 with ``callback``; ``arguments``: TrainingArguments of its own."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(tiny_gpt2_config(callback.tokenizer.id_space))
    args = TrainingArguments(
        **{
            "output_dir": str(out),
            "use_cpu": True,
            "report_to": [],
            "max_steps": STEPS,
            "save_steps": 4,
            "per_device_train_batch_size": 4,
            "learning_rate": 1e-3,
            "logging_steps": STEPS,
            "disable_tqdm": True,
            **arguments,
        }
    )
    return Trainer(
        model=model,
        args=args,
        train_dataset=[{"text": t} for t in texts],
        eval_dataset=None if eval_texts is None else [{"text": t} for t in eval_texts],
        callbacks=[callback, *extra],
        data_collator=callback.collator(seq_len=SEQ_LEN),
    )


@pytest.fixture(scope="module")
def followed(registry_server, lineage_versions, tmp_path_factory):
    """A Trainer run of 8 steps, versions 2, 3 and 4 published after steps 2, 3 and 6."""
    url, _ = registry_server
    texts, versions = lineage_versions
    name = create_lineage(url, versions[1])
    callback = TokmaintCallback(url, name)
    recorder = Recorder(callback)
    trainer = _trainer(
        callback,
        texts,
        tmp_path_factory.mktemp("run"),
        recorder,
        PublishAfter(callback, url, {2: versions[2], 3: versions[3], 6: versions[4]}),
    )
    try:
        trainer.train()
    finally:
        callback.close()
    return {
        "url": url,
        "name": name,
        "texts": texts,
        "versions": versions,
        "callback": callback,
        "recorder": recorder,
        "trainer": trainer,
    }


def test_versions_published_during_training_are_applied_between_steps(followed):
    callback, forwards, versions = followed["callback"], followed["recorder"].forwards, followed["versions"]
    assert [(t["version"], t["step"]) for t in callback.follower.taken] == [(2, 2), (3, 3), (4, 6)]
    assert [f["version"] for f in forwards] == [1, 1, 2, 3, 3, 3, 4, 4]
    # Collated before their version came (the Trainer fetches a step's batch first, one ahead): encoded again.
    assert [(f["collated"], f["version"]) for f in forwards if f["step"] in (2, 3, 6)] == [(1, 2), (1, 3), (3, 4)]
    for f in forwards:
        inputs, labels = token_batch(versions[f["version"]], f["texts"], seq_len=SEQ_LEN)
        assert torch.equal(f["input_ids"], inputs) and torch.equal(f["labels"], labels)
        assert f["num_items"] == label_count(labels)  # the step's loss is its labels' mean (one micro-batch a step)
    model = followed["trainer"].model
    assert model.get_input_embeddings().weight.shape[0] == 301
    assert model.config.bos_token_id == versions[4].vocab["<|endoftext|>"]


def test_a_checkpoint_resumes_on_its_version(followed, tmp_path):
    """The checkpoint after step 4 holds version 3 on 301 rows (version 2 added one, version 3 has
    300 ids); resumed, the model is grown to them, starts on version 3 with the checkpoint's
    weights, and takes version 4 (the lineage's latest by now) before step 4."""
    url, name = followed["url"], followed["name"]
    folder = followed["trainer"].args.output_dir + "/checkpoint-4"
    saved = CheckpointFolder.read(folder)
    assert (saved.version, saved.rows, saved.step, saved.sha256) == (3, 301, 4, followed["versions"][3].sha256)
    callback = TokmaintCallback(url, name, checkpoint=folder)
    recorder = Recorder(callback)
    trainer = _trainer(callback, followed["texts"], tmp_path, recorder)
    try:
        trainer.train(resume_from_checkpoint=folder)
    finally:
        callback.close()
    version, embeddings = recorder.began
    assert version == 3 and torch.equal(embeddings, load_file(f"{folder}/model.safetensors")["transformer.wte.weight"])
    assert [(t["version"], t["step"]) for t in callback.follower.taken] == [(4, 4)]
    assert [f["step"] for f in recorder.forwards] == [4, 5, 6, 7] and {f["version"] for f in recorder.forwards} == {4}


def test_a_resume_the_callback_was_not_told_of_stops(followed, tmp_path):
    folder = followed["trainer"].args.output_dir + "/checkpoint-8"  # version 4, the latest: the model fits
    callback = TokmaintCallback(followed["url"], followed["name"])
    trainer = _trainer(callback, followed["texts"], tmp_path)
    try:
        with pytest.raises(TokmaintError, match="resumes at step 8, but TokmaintCallback was not told"):
            trainer.train(resume_from_checkpoint=folder)
    finally:
        callback.close()


def test_evaluate_reports_eval_loss_and_early_stopping_reads_it(registry_server, lineage_versions, tmp_path):
    """``evaluate`` reports the held-out texts' mean loss, ``eval_loss``: the best checkpoint is
    the one of least ``eval_loss``, and ``EarlyStoppingCallback`` stops on it, here after the
    second evaluation, which its threshold counts as no better than the first."""
    url, _ = registry_server
    texts, versions = lineage_versions
    callback = TokmaintCallback(url, create_lineage(url, versions[1]))
    trainer = _trainer(
        callback,
        texts[:-8],
        tmp_path,
        EarlyStoppingCallback(early_stopping_patience=1, early_stopping_threshold=1e9),
        eval_texts=texts[-8:],
        eval_strategy="steps",
        eval_steps=2,
        save_steps=2,
        per_device_eval_batch_size=8,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
    )
    try:
        trainer.train()
    finally:
        callback.close()
    losses = {e["step"]: e["eval_loss"] for e in trainer.state.log_history if "eval_loss" in e}
    assert trainer.state.global_step == 4 and list(losses) == [2, 4]
    best = min(losses, key=losses.__getitem__)
    assert trainer.state.best_metric == losses[best]
    assert trainer.state.best_model_checkpoint == f"{tmp_path}/checkpoint-{best}"
    metrics = trainer.evaluate()
    inputs, labels = token_batch(versions[1], texts[-8:], seq_len=SEQ_LEN)
    with torch.no_grad():
        expected = trainer.model.eval()(input_ids=inputs, labels=labels).loss.item()
    assert math.isfinite(metrics["eval_loss"]) and metrics["eval_loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["eval_loss"] == pytest.approx(losses[best], rel=1e-5)  # the best model, loaded at the end


def test_label_smoothing_stops_at_a_batch_encoded_again(registry_server, lineage_versions, tmp_path):
    """The Trainer smooths the labels it collated: a batch of version 1 the model reads in version
    2 (step 2's) would be scored against version 1's ids."""
    url, _ = registry_server
    texts, versions = lineage_versions
    callback = TokmaintCallback(url, create_lineage(url, versions[1]))
    trainer = _trainer(
        callback, texts, tmp_path, PublishAfter(callback, url, {2: versions[2]}), label_smoothing_factor=0.1
    )
    try:
        with pytest.raises(TokmaintError, match="encodes a batch of version 1 again in version 2, but the Trainer"):
            trainer.train()
    finally:
        callback.close()
    assert trainer.state.global_step == 2


def test_the_saved_model_loads_with_the_auto_classes_and_encodes_as_the_version(followed, tmp_path):
    trainer, version = followed["trainer"], followed["versions"][4]
    trainer.save_model(str(tmp_path))
    model = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    texts = followed["recorder"].forwards[-1]["texts"]
    assert [tokenizer(t)["input_ids"] for t in texts] == [version.encode(t) for t in texts]
    ids = torch.tensor([version.encode(texts[0])])
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, trainer.model.eval()(input_ids=ids).logits)
    _, read, stamp = load_model(tmp_path, device="cpu")  # tokmaint's own reader: the folder checked whole
    assert read.sha256 == version.sha256 and (stamp["lineage"], stamp["version"]) == (followed["name"], 4)
