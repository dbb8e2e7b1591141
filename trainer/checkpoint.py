"""Checkpoints that know their tokenizer: the model, the optimizer, the training position, the
random state (dropout) and the tokenizer version (lineage, number, sha256) they were trained
with, written atomically and durably; loading
refuses a checkpoint made with another version than the one the trainer holds, since its
embedding rows mean other tokens.

    save_checkpoint(path, model=model, optimizer=optimizer, tokenizer=stamp, position={"step": 120})
    position = load_checkpoint(path, model=model, optimizer=optimizer, tokenizer=stamp)
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tokenizer_service.errors import TokmaintError
from tokenizer_service.output_dir import fsync_directory
from trainer.apply_revision import grow, removed_ids, set_removed


@dataclass(frozen=True)
class TokenizerStamp:
    """The tokenizer version a model is trained with."""

    lineage: str
    version: int
    sha256: str


class CheckpointMismatch(TokmaintError):
    """A checkpoint made with another tokenizer version than the one at hand."""


def save_checkpoint(path: str | Path, *, model: nn.Module, optimizer: torch.optim.Optimizer,
                    tokenizer: TokenizerStamp, position: dict[str, Any], tokenizer_json: str | None = None) -> None:
    """Write the checkpoint to ``path`` whole or not at all (a temporary file, fsynced, then a
    rename, fsynced: after a crash or a power cut the old checkpoint or the new one is there).
    ``tokenizer_json``: the version itself, kept so that ``tokmaint trainer export`` needs
    nothing else (with the model's config)."""
    path = Path(path)
    part = path.with_name(path.name + ".part")
    with open(part, "wb") as f:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "tokenizer": asdict(tokenizer),
                    "position": position, "rows": model.get_input_embeddings().weight.shape[0],
                    "removed": removed_ids(model), "rng": torch.get_rng_state(),  # dropout goes on as it would
                    "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                    "config": model.config.to_dict(), "tokenizer_json": tokenizer_json}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)
    fsync_directory(path.parent)


def load_checkpoint(path: str | Path, *, model: nn.Module, optimizer: torch.optim.Optimizer,
                    tokenizer: TokenizerStamp) -> dict[str, Any]:
    """Load the checkpoint at ``path`` into ``model`` and ``optimizer`` (resized to its rows) and
    return its training position; :class:`CheckpointMismatch` when it was trained with another
    tokenizer version than ``tokenizer``."""
    # On the CPU: torch.set_rng_state takes a CPU ByteTensor (a GPU's resume crashed), and
    # load_state_dict copies each tensor to its parameter's device (Adam's step stays on the CPU).
    data = torch.load(Path(path), map_location="cpu", weights_only=True)
    theirs = TokenizerStamp(**data["tokenizer"])
    if theirs.sha256 != tokenizer.sha256:
        raise CheckpointMismatch(
            f"{path} was trained with tokenizer {theirs.lineage} version {theirs.version} "
            f"(sha256 {theirs.sha256[:12]}), not {tokenizer.lineage} version {tokenizer.version} "
            f"(sha256 {tokenizer.sha256[:12]}): load it with that version, then apply the diff from it")
    rows = model.get_input_embeddings().weight.shape[0]
    if data["rows"] < rows:
        raise CheckpointMismatch(f"{path} has {data['rows']} embedding rows, fewer than the model's {rows}: "
                                 "build the model with as many")
    if data["rows"] > rows:  # the vocabulary grew while it trained
        grow(model, optimizer, data["rows"])
    model.load_state_dict(data["model"])
    optimizer.load_state_dict(data["optimizer"])
    set_removed(model, data["removed"])
    torch.set_rng_state(data["rng"])
    if data["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(data["cuda_rng"])
    return data["position"]
