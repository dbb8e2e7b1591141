"""Follow a lineage from a ``transformers.Trainer``: two lines in an ordinary Trainer script.

    callback = TokmaintCallback("http://registry:8000", "news")       # checkpoint=...: resume on its version
    model = GPT2LMHeadModel(tiny_gpt2_config(callback.tokenizer.id_space))
    trainer = Trainer(model=model, args=args, train_dataset=[{"text": t} for t in texts],
                      callbacks=[callback], data_collator=callback.collator(seq_len=256))
    trainer.train()
    trainer.save_model("model")  # the weights, and the version's tokenizer.json beside them

It is ``trainer.follow.LineageFollower`` in a Trainer's hooks: ``on_step_begin`` (between two
optimizer steps: the step's micro-batches are fetched, none has gone forward) applies a version
due to the model and the Trainer's optimizer.

**When a batch is encoded.** A batch is collated before the version its step trains with is known:
the Trainer fetches a step's micro-batches before ``on_step_begin``, accelerate's loader collates
one batch ahead, and loader workers further still. So the collator's encoding is a head start:
it keeps the texts and the version it encoded with in the batch, and a forward pre-hook on the
model encodes them again, labels too, when the model's version is another by then. The collated
batch has its labels: the Trainer computes a loss only for a batch with labels (``evaluate``'s
``eval_loss``, which ``metric_for_best_model`` and early stopping read), and it counts them for the
step's loss (``num_items_in_batch``) before the hook. A batch encoded again keeps its share of
that count: the hook scales it by the batch's new labels over its collated ones.

**Checkpoints.** ``on_save`` writes the version's files (``tokmaint.json``: lineage, version,
sha256; ``tokenizer.json``) into the Trainer's checkpoint folder. The Trainer loads a checkpoint's
weights before any callback runs in ``train``, so a resume names the folder twice:
``TokmaintCallback(..., checkpoint=folder)`` starts on its version and grows the model to its rows
when the Trainer is made, and ``trainer.train(resume_from_checkpoint=folder)``; a resume the callback
was not told of stops at ``on_train_begin`` (its weights would mean another version's ids).
``Trainer.save_model`` saves a collator's ``tokenizer`` when the Trainer has no
``processing_class``: the collator's is this callback, whose ``save_pretrained`` writes the files.

One process: under ``torch.distributed`` the Trainer keeps its ``DistributedDataParallel`` wrapper,
which a version adding rows would have to replace; use ``LineageFollower`` in a loop there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from registry.client import RegistryClient
from tokenizer_service.errors import TokmaintError
from tokenizer_service.hub_files import bos_token_id
from trainer.apply_revision import grow
from trainer.checkpoint import CheckpointMismatch
from trainer.export import STAMP, write_tokenizer_files
from trainer.follow import FollowsLineage, LineageFollower
from trainer.hub import HubVersions

log = logging.getLogger("tokmaint.trainer")

BATCH_KEY = "tokmaint_texts"  # the collated batch's texts, taken out again before the model's forward


@dataclass(frozen=True)
class TextBatch:
    """A batch's texts and the version they were encoded with, for the hook to encode them again."""

    texts: list[str]
    version: int
    seq_len: int


def label_count(labels: torch.Tensor) -> int:
    """The labels the loss of a causal LM reads, counted as the Trainer counts them for
    ``num_items_in_batch``: each row's first is the target of no position.

    >>> label_count(torch.tensor([[-100, 5, 6, -100], [7, 8, 9, 10]]))
    5
    """
    return int(labels[..., 1:].ne(-100).sum())


@dataclass(frozen=True)
class CheckpointFolder:
    """What a Trainer's checkpoint folder says of the model in it."""

    lineage: str
    version: int
    sha256: str
    rows: int  # the model's embedding rows (config.json's vocab_size)
    step: int  # the optimizer steps done (trainer_state.json's global_step)

    @classmethod
    def read(cls, folder: str | Path) -> CheckpointFolder:
        """The stamp, rows and step of ``folder``; a folder without them is a :class:`TokmaintError`."""
        folder = Path(folder)
        try:
            stamp = json.loads((folder / STAMP).read_text(encoding="utf-8"))
            rows = json.loads((folder / "config.json").read_text(encoding="utf-8"))["vocab_size"]
            step = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))["global_step"]
            return cls(stamp["lineage"], stamp["version"], stamp["sha256"], rows, step)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TokmaintError(
                f"{folder} is not a checkpoint of a Trainer with TokmaintCallback ({STAMP}, "
                f"config.json and trainer_state.json): {exc}"
            ) from None


class TokmaintCallback(FollowsLineage, TrainerCallback):
    """A lineage followed by a ``transformers.Trainer``: the version its model is on
    (:attr:`version`, :attr:`tokenizer`), each newer one applied between two optimizer steps."""

    def __init__(
        self,
        registry: RegistryClient | HubVersions | str,
        lineage: str,
        *,
        checkpoint: str | Path | None = None,
        **follow: Any,
    ) -> None:
        """``registry``, ``lineage`` and ``follow`` (``events``, ``strategy``, ``retry_steps``): as
        ``LineageFollower``'s. ``checkpoint``: the Trainer's checkpoint folder the training resumes
        from (its version; the model is grown to its rows when the Trainer is made); by default the
        latest version, from step 0."""
        self.resumed = CheckpointFolder.read(checkpoint) if checkpoint is not None else None
        self.follower = LineageFollower(
            registry, lineage, version=self.resumed.version if self.resumed else None, **follow
        )
        if self.resumed and (self.resumed.lineage, self.resumed.sha256) != (lineage, self.tokenizer.sha256):
            raise CheckpointMismatch(
                f"{checkpoint} was trained with {self.resumed.lineage} version "
                f"{self.resumed.version} (sha256 {self.resumed.sha256[:12]}), not {lineage} "
                f"version {self.version} (sha256 {self.tokenizer.sha256[:12]})"
            )
        self.model: nn.Module | None = None
        self._hook: torch.utils.hooks.RemovableHandle | None = None

    def close(self) -> None:
        self.follower.close()

    def collator(self, *, seq_len: int) -> TokmaintCollator:
        """The Trainer's ``data_collator``: examples ``{"text": ...}``, at most ``seq_len`` ids each."""
        return TokmaintCollator(self, seq_len=seq_len)

    def save_pretrained(self, folder: str | Path) -> None:
        """The version's files in ``folder`` (``export.write_tokenizer_files``): what
        ``Trainer.save_model`` writes beside the weights."""
        config = self.model.config if self.model is not None else None
        write_tokenizer_files(
            Path(folder),
            self.tokenizer,
            self.follower.state_dict(),
            model_max_length=getattr(config, "max_position_embeddings", None),
        )

    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, *, model: nn.Module, **kwargs: Any
    ) -> None:
        self.model = model
        # The Trainer drops the examples' fields the model's forward does not name ("text" among
        # them) before the collator sees them; the callback does the text-to-ids step itself.
        args.remove_unused_columns = False
        rows = model.get_input_embeddings().weight.shape[0]
        if self.resumed and self.resumed.rows > rows:  # the vocabulary grew before the checkpoint
            grow(model, None, self.resumed.rows)

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, *, model: nn.Module, **kwargs: Any
    ) -> None:
        if (
            torch.distributed.is_available()
            and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1
        ):
            raise TokmaintError(
                "TokmaintCallback follows a lineage in one process: under torch.distributed, call "
                "trainer.follow.LineageFollower from your own loop"
            )
        if state.global_step != (self.resumed.step if self.resumed else 0):
            raise TokmaintError(
                f"the Trainer resumes at step {state.global_step}, but TokmaintCallback was "
                f"{'made at step ' + str(self.resumed.step) if self.resumed else 'not told'}: "
                "give it the folder of resume_from_checkpoint (checkpoint=...)"
            )
        self.model = self.follower.prepare(model)
        if (bos := bos_token_id(self.tokenizer)) is not None:  # the context token_batch starts texts from
            model.config.bos_token_id = model.config.eos_token_id = bos
        if self._hook is None:
            self._hook = model.register_forward_pre_hook(self._encode_with_model_version, with_kwargs=True)
        log.info(
            "trainer: training %s version %s from step %s",
            self.follower.lineage,
            self.version,
            state.global_step,
            extra={"lineage": self.follower.lineage, "step": state.global_step},
        )

    def on_step_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        *,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        **kwargs: Any,
    ) -> None:
        self.follower.between_steps(model, optimizer, step=state.global_step)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if args.should_save:  # the process that writes the checkpoint
            self.save_pretrained(Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _encode_with_model_version(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The forward's input ids and labels in the version the model has now (a forward pre-hook)."""
        batch = kwargs.pop(BATCH_KEY, None)
        if batch is None:  # not one of the collator's batches (a generation, the user's own call)
            return None
        if batch.version == self.version:
            return args, kwargs
        if "labels" not in kwargs:  # the Trainer took them for its own loss (label smoothing, compute_loss_func)
            raise TokmaintError(
                f"TokmaintCallback encodes a batch of version {batch.version} again in version "
                f"{self.version}, but the Trainer computes its loss from the labels collated in "
                f"version {batch.version}: train without label_smoothing_factor and compute_loss_func"
            )
        device = kwargs["input_ids"].device
        inputs, labels = self.follower.encode(batch.texts, seq_len=batch.seq_len)
        encoded = {**kwargs, "input_ids": inputs.to(device), "labels": labels.to(device)}
        if "num_items_in_batch" in kwargs and (collated := label_count(kwargs["labels"])):
            encoded["num_items_in_batch"] = kwargs["num_items_in_batch"] * label_count(labels) / collated
        return args, encoded


class TokmaintCollator:
    """Examples ``{"text": ...}`` as a Trainer's batch: input ids in the version the model has
    now, and the texts, for the callback to encode them again if a version comes before their
    step (the module's docstring says why)."""

    def __init__(self, callback: TokmaintCallback, *, seq_len: int) -> None:
        self.callback, self.seq_len = callback, seq_len

    @property
    def tokenizer(self) -> TokmaintCallback:
        """What ``Trainer.save_model`` saves beside the weights (``save_pretrained``)."""
        return self.callback

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if missing := [k for k, e in enumerate(examples) if not isinstance(e.get("text"), str)]:
            raise TokmaintError(
                f"TokmaintCollator takes examples {{'text': str}}; example {missing[0]} of the batch "
                f"has keys {sorted(examples[missing[0]])}"
            )
        texts = [e["text"] for e in examples]
        follower = self.callback.follower
        inputs, labels = follower.encode(texts, seq_len=self.seq_len)
        return {"input_ids": inputs, "labels": labels, BATCH_KEY: TextBatch(texts, follower.version, self.seq_len)}
