"""``tokmaint trainer run``: train a causal LM on a corpus or the ``docs`` topic (``trainer.data``)
with a lineage's current tokenizer, and take each newer version as the registry publishes it,
between two optimizer steps.

It is a loop on ``trainer.follow.LineageFollower``, as a user's own loop would be: the follower
hears of versions (the registry's watch, the Hub protocol's ``main`` with ``--hub``, or the
``tokenizer.revisions`` topic), and before each step, and while the stream has nothing new,
applies a newer one to the model and the optimizer; the batch prepared for the step is
tokenised again with the new version. Checkpoints record the version.

    trainer = Trainer(registry=client, lineage="news", data=CorpusTexts(texts), settings=TrainerSettings())
    report = trainer.run(steps=100)
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm
from transformers import GPT2Config, GPT2LMHeadModel

from registry.client import Outages, RegistryClient
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import TokmaintError
from tokenizer_service.hub_files import BOS_TOKENS, bos_token_id
from trainer.apply_revision import set_removed
from trainer.byte_level import ByteLevelModel, evaluate_texts, first_bytes
from trainer.checkpoint import CheckpointMismatch, TokenizerStamp, load_checkpoint, read_checkpoint, save_checkpoint
from trainer.data import TrainingTexts
from trainer.follow import FollowsLineage, LineageFollower
from trainer.hub import HubVersions
from trainer.config import CAUSAL_LM_LOSS, TrainerSettings

log = logging.getLogger("tokmaint.trainer")


def tiny_gpt2_config(vocab_size: int, **overrides: Any) -> GPT2Config:
    """The default model: GPT-2's architecture at a size that trains on a CPU.

    >>> tiny_gpt2_config(300).n_embd
    64
    """
    return GPT2Config(
        **{
            "n_layer": 2,
            "n_head": 2,
            "n_embd": 64,
            "n_positions": 256,
            "vocab_size": vocab_size,
            "bos_token_id": None,
            "eos_token_id": None,
            **overrides,
        }
    )  # not GPT-2's 50256


class NonFiniteLoss(TokmaintError):
    """A step's loss is NaN or infinite: the model diverged, and training on would only spread it."""


class Trainer(FollowsLineage):
    """One model trained on ``data`` with a lineage's versions."""

    def __init__(
        self,
        *,
        registry: RegistryClient | HubVersions,
        lineage: str,
        data: TrainingTexts,
        settings: TrainerSettings | None = None,
        model_config: dict[str, Any] | None = None,
        checkpoint_dir: str | Path | None = None,
        events: tuple[str, str] | None = None,
        held_out: Sequence[str] = (),
        progress: bool = False,
        outages: Outages | None = None,
    ) -> None:
        """``registry``: the registry's client, or ``trainer.hub.HubVersions`` (the Hub protocol).
        ``events``: (bootstrap, topic) to learn of versions from the revision events there
        instead of the registry's watch. ``outages``: where the registry's outages are counted
        from the trainer's first request on (``trainer.metrics``' gauge reads them).
        ``held_out``: texts the model is scored on in bits per byte every ``eval_every`` steps
        (their first ``eval_bytes`` bytes), whatever version it reads with
        (``trainer.byte_level``)."""
        settings = settings or TrainerSettings()
        self.held_out = [first_bytes(t, settings.eval_bytes) for t in held_out]
        self.evaluations: list[dict[str, Any]] = []
        self.registry, self.lineage, self.data, self.settings = registry, lineage, data, settings
        self.checkpoint = Path(checkpoint_dir) / "checkpoint.pt" if checkpoint_dir else None
        self.progress = progress
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        resuming = self.checkpoint is not None and self.checkpoint.is_file()
        saved = read_checkpoint(self.checkpoint) if resuming else None
        stamp = TokenizerStamp(**saved["tokenizer"]) if saved is not None else None
        if stamp is not None and stamp.lineage != lineage:  # before its version is asked of the wrong lineage
            raise CheckpointMismatch(
                f"{self.checkpoint} was trained on lineage {stamp.lineage!r}, not {lineage!r}: resume it on "
                f"{stamp.lineage!r}, or train {lineage!r} in another checkpoint folder"
            )
        # A resumed model starts at its checkpoint's version (then takes the latest as any newer one).
        self.follower = LineageFollower(
            registry,
            lineage,
            version=stamp.version if stamp else None,
            fallback=_kept_while_away(saved, stamp) if saved is not None and stamp is not None else None,
            outages=outages,
            events=events,
            strategy=settings.strategy,
            retry_steps=settings.retry_steps,
            warm_steps=settings.warm_steps,
            warm_docs=settings.warm_docs,
            warm_lr=settings.warm_lr,
            revision_budget=settings.revision_budget,
        )
        self.position, self.step = data.start, 0  # the next batch's position, the optimizer steps done
        torch.manual_seed(settings.seed)
        self.model = GPT2LMHeadModel(tiny_gpt2_config(self.tokenizer.id_space, **(model_config or {}))).to(self.device)
        self.model.loss_type = CAUSAL_LM_LOSS
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=settings.lr)
        set_removed(self.model, self.tokenizer.free_ids)  # a resumed model's come from its checkpoint
        if stamp is not None:
            # Against the version the registry has under that number, not the checkpoint's own stamp.
            position = load_checkpoint(
                self.checkpoint, model=self.model, optimizer=self.optimizer, tokenizer=self.follower.stamp
            )
            self.position, self.step = position["position"], position["step"]
        # Said once it follows: a version published from here on is taken (one before is not news).
        log.info(
            "trainer: training %s version %s on %s from step %s",
            lineage,
            self.version,
            self.device,
            self.step,
            extra={"lineage": lineage, "step": self.step},
        )

    @property
    def latest(self) -> Any:
        """What the follower hears of the lineage's newest version (its ``number``)."""
        return self.follower.latest

    def close(self) -> None:
        self.follower.close()
        self.data.close()

    def _save(self) -> None:
        self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(
            self.checkpoint,
            model=self.model,
            optimizer=self.optimizer,
            tokenizer=self.follower.stamp,
            position={"position": self.position, "step": self.step},
            tokenizer_json=self.tokenizer.to_json(),
        )

    def _follow(self) -> bool:
        """Take the lineage's newest version if it is due; True when taken."""
        version = self.version
        self.model = self.follower.between_steps(self.model, self.optimizer, step=self.step)
        return self.version != version

    def _batch(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, labels = self.follower.encode(texts, seq_len=self.settings.seq_len)
        return inputs.to(self.device), labels.to(self.device)

    def evaluate(self) -> float | None:
        """Bits per byte of the model on the held-out texts, exact whatever the version (kept in
        ``evaluations`` with the step and the version); None without held-out texts or without a
        token in the version to start texts from."""
        bos = bos_token_id(self.tokenizer)
        if not self.held_out or bos is None:
            return None
        try:
            scored = evaluate_texts([ByteLevelModel(self.model, self.tokenizer, bos_token_id=bos)], self.held_out)
        finally:
            self.model.train()
        self.evaluations.append(
            {
                "step": self.step,
                "version": self.version,
                "bits_per_byte": scored["bits_per_byte"],
                "bytes": scored["bytes"],
            }
        )
        return scored["bits_per_byte"]

    def run(self, *, steps: int) -> dict[str, Any]:
        """``steps`` optimizer steps; a newer version is taken between two of them."""
        started, tokens, losses, versions = time.perf_counter(), 0, [], []
        if self.held_out and bos_token_id(self.tokenizer) is None:
            log.warning(
                "trainer: %s version %s has no token to start texts from (%s): no bits per byte",
                self.lineage,
                self.version,
                ", ".join(BOS_TOKENS),
            )
        bar = tqdm(total=steps, disable=not self.progress, unit="step")
        for _ in range(steps):
            # Versions are taken while the stream has nothing new too: the trainer is between steps.
            texts, after = self.data.take(self.position, self.settings.batch_size, waiting=self._follow)
            inputs, labels = self._batch(texts)
            if self._follow():  # prepared with the old version: again
                inputs, labels = self._batch(texts)
            loss = self.model(input_ids=inputs, labels=labels).loss
            if not math.isfinite(value := loss.item()):  # before the step: the last checkpoint stays good
                bar.close()
                raise NonFiniteLoss(
                    f"trainer: the loss at step {self.step + 1} on {self.lineage} version {self.version} is "
                    f"{value}: the model diverged; lower --lr or --warm-lr"
                )
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.position, self.step = after, self.step + 1
            tokens += int((labels != -100).sum())
            losses.append(value)
            versions.append(self.version)
            if self.checkpoint is not None and self.step % self.settings.checkpoint_every == 0:
                self._save()
            if self.settings.eval_every and self.step % self.settings.eval_every == 0:
                self.evaluate()
            bits = self.evaluations[-1]["bits_per_byte"] if self.evaluations else None
            bar.set_postfix(
                loss=f"{losses[-1]:.3f}",
                bpb="-" if bits is None else f"{bits:.3f}",
                tok_s=f"{tokens / (time.perf_counter() - started):.0f}",
                version=self.version,
            )
            bar.update()
        bar.close()
        if self.settings.eval_every and steps and (not self.evaluations or self.evaluations[-1]["step"] != self.step):
            self.evaluate()
        if self.checkpoint is not None:
            self._save()
        return {
            "lineage": self.lineage,
            "steps": self.step,
            "version": self.version,
            "losses": losses,
            "versions": versions,
            "taken": self.follower.taken,
            "refused": sorted(self.follower.refused),
            "evaluations": list(self.evaluations),
            "bits_per_byte": self.evaluations[-1]["bits_per_byte"] if self.evaluations else None,
            "tokens_per_s": tokens / (time.perf_counter() - started),
            "registry_away_seconds": self.follower.registry_away_seconds,
            "device": self.device,
        }


def _kept_while_away(saved: dict[str, Any], stamp: TokenizerStamp) -> BPETokenizer | None:
    """The checkpoint's own copy of its version, for the follower to resume on should the
    registry be away (a trainer restarted during an outage trains on, and hears of newer versions
    once the registry is back); None when the checkpoint holds none, or none with the sha256 it
    was trained with: the registry's is then waited for, and the checkpoint checked against it
    (``load_checkpoint`` names a stamp that is not the registry's version)."""
    if not saved.get("tokenizer_json"):
        return None
    kept = BPETokenizer.from_json(saved["tokenizer_json"])
    return kept if kept.sha256 == stamp.sha256 else None


# The model's shape, each at least 1 (GPT2Config takes 0 layers or heads, and a negative count, without a word).
SHAPE_FIELDS = ("n_layer", "n_head", "n_embd", "n_positions")


def read_model_config(path: str | None, *, seq_len: int) -> dict[str, Any]:
    """``--model-config``: a JSON object of GPT2Config fields over the tiny default, checked with
    ``--seq-len`` before anything is trained. A field GPT2Config does not have, one given under
    two names (``n_embd`` and ``hidden_size``), ``vocab_size`` (each version sets its own), a
    shape field under 1, ``n_embd`` not a multiple of ``n_head``, fewer positions than
    ``seq_len`` tokens, or anything else GPT-2 is not built with is a :class:`TokmaintError`
    naming the field.

    >>> read_model_config(None, seq_len=64)
    {}
    """
    config = {} if path is None else _model_config_fields(path)
    where = f"--model-config {path}" if path else "the default model"
    try:
        shape = tiny_gpt2_config(1, **config)
    except Exception as exc:  # GPT2Config's checks raise huggingface_hub's own errors, not ValueError
        raise TokmaintError(f"{where}: {str(exc).splitlines()[-1].strip()}") from None
    for field in SHAPE_FIELDS:
        if (value := getattr(shape, field)) < 1:
            raise TokmaintError(f"{where}: {field} must be a whole number ≥ 1, got {value}")
    if shape.n_embd % shape.n_head:
        raise TokmaintError(f"{where}: n_embd ({shape.n_embd}) must be a multiple of n_head ({shape.n_head})")
    if shape.n_positions < seq_len:
        raise TokmaintError(
            f"--seq-len {seq_len} is more tokens than {where}'s n_positions ({shape.n_positions}): "
            "lower it, or raise n_positions in --model-config"
        )
    try:  # what else GPT-2 refuses (a dropout of 2, say), built on no memory
        with torch.device("meta"):
            GPT2LMHeadModel(shape)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise TokmaintError(f"{where}: {str(exc).splitlines()[0]}") from None
    return config


def _model_config_fields(path: str) -> dict[str, Any]:
    """``--model-config``'s object, each field under GPT2Config's own name (``n_embd`` for ``hidden_size``)."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TokmaintError(f"--model-config {path} is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise TokmaintError(f"--model-config {path} is not a JSON object of GPT2Config fields")
    if unknown := sorted(set(config) - set(GPT2Config().to_dict()) - set(GPT2Config.attribute_map)):
        raise TokmaintError(f"--model-config {path}: GPT2Config has no field {', '.join(unknown)}")
    for other, field in GPT2Config.attribute_map.items():
        if other in config and field in config:
            raise TokmaintError(f"--model-config {path} gives {field} twice (as {field} and {other}): keep one")
    if "vocab_size" in config:
        raise TokmaintError(f"--model-config {path}: vocab_size is each version's own (the ids it uses): leave it out")
    return {GPT2Config.attribute_map.get(field, field): value for field, value in config.items()}
