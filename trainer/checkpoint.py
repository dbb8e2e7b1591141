"""Checkpoints that know their tokenizer: the model, the optimizer, the training position, the
random state (dropout) and the tokenizer version (lineage, number, sha256) they were trained
with, written atomically and durably; loading
refuses a checkpoint made with another version than the one the trainer holds, since its
embedding rows mean other tokens.

    save_checkpoint(path, model=model, optimizer=optimizer, tokenizer=stamp, position={"step": 120})
    position = load_checkpoint(path, model=model, optimizer=optimizer, tokenizer=stamp)
"""

from __future__ import annotations

import errno
import os
import pickle
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


def save_checkpoint(
    path: str | Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    tokenizer: TokenizerStamp,
    position: dict[str, Any],
    tokenizer_json: str | None = None,
) -> None:
    """Write the checkpoint to ``path`` whole or not at all (a temporary file, fsynced, then a
    rename, fsynced: after a crash or a power cut the old checkpoint or the new one is there).
    ``tokenizer_json``: the version itself, kept so that ``tokmaint trainer export`` needs
    nothing else (with the model's config)."""
    path = Path(path)
    part = path.with_name(path.name + ".part")
    with open(part, "wb") as f:
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "tokenizer": asdict(tokenizer),
                "position": position,
                "rows": model.get_input_embeddings().weight.shape[0],
                "removed": removed_ids(model),
                "rng": torch.get_rng_state(),  # dropout goes on as it would
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "config": model.config.to_dict(),
                "tokenizer_json": tokenizer_json,
            },
            f,
        )
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)
    fsync_directory(path.parent)


# What every checkpoint holds, and what a resume reads besides (``save_checkpoint`` writes all of them).
EXPORTED_KEYS = ("model", "tokenizer", "rows")
RESUMED_KEYS = (*EXPORTED_KEYS, "optimizer", "position", "removed", "rng", "cuda_rng")


def read_checkpoint(path: str | Path, *, keys: tuple[str, ...] = EXPORTED_KEYS) -> dict[str, Any]:
    """A trainer checkpoint's contents (on the CPU), holding ``keys``; a file that is none (not
    there, truncated, corrupt, another program's, or missing a part) is a
    :class:`TokmaintError` saying so in one line, with every reason.

    >>> import tempfile
    >>> bad = Path(tempfile.mkdtemp()) / "checkpoint.pt"
    >>> _ = bad.write_bytes(b"PK not a checkpoint")
    >>> read_checkpoint(bad)
    Traceback (most recent call last):
    ...
    tokenizer_service.errors.TokmaintError: ...checkpoint.pt is not a trainer checkpoint: truncated, corrupt or not \
written by torch.save (tokmaint trainer run writes one)
    """
    path = Path(path)
    if not path.is_file():
        raise TokmaintError(f"no checkpoint at {path}")
    try:
        # torch's own message for a corrupt file runs to several lines and asks to file an issue
        # with PyTorch: the user's problem is the file, which this says.
        data = torch.load(path, map_location="cpu", weights_only=True)
    except (
        RuntimeError,
        OSError,
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        UnicodeDecodeError,
        KeyError,
        IndexError,
    ) as exc:
        if isinstance(exc, OSError) and exc.errno != errno.EINVAL:  # EINVAL: torch's zip reader on a truncated file
            raise TokmaintError(f"cannot read {path}: {exc.strerror or exc}") from None
        raise TokmaintError(
            f"{path} is not a trainer checkpoint: truncated, corrupt or not written by torch.save "
            f"(tokmaint trainer run writes one)"
        ) from exc
    if not isinstance(data, dict):
        raise TokmaintError(f"{path} is not a trainer checkpoint: it holds a {type(data).__name__}, not a dictionary")
    reasons = [f"no {key!r} in it" for key in keys if key not in data]
    stamp = data.get("tokenizer")
    if "tokenizer" in data and not (
        isinstance(stamp, dict)
        and isinstance(stamp.get("lineage"), str)
        and isinstance(stamp.get("version"), int)
        and isinstance(stamp.get("sha256"), str)
    ):
        reasons.append("'tokenizer' is not a version stamp (lineage, version, sha256)")
    if "model" in data and not (
        isinstance(data["model"], dict) and all(isinstance(v, torch.Tensor) for v in data["model"].values())
    ):
        reasons.append("'model' is not a state dict of tensors")
    if "rows" in data and not (isinstance(data["rows"], int) and data["rows"] >= 1):
        reasons.append(f"'rows' is {data['rows']!r}, not a whole number ≥ 1")
    if not isinstance(data.get("removed", []), list):
        reasons.append("'removed' is not a list of ids")
    if not isinstance(data.get("config", {}), dict):
        reasons.append("'config' is not a dictionary of model settings")
    if not isinstance(data.get("tokenizer_json"), str | None):
        reasons.append("'tokenizer_json' is not text")
    if reasons:
        raise TokmaintError(f"{path} is not a trainer checkpoint: {'; '.join(reasons)}")
    return data


def state_dict_error(exc: Exception) -> str:
    """torch's ``load_state_dict`` error (a line for each tensor) on one line.

    >>> state_dict_error(RuntimeError("Error(s) in loading state_dict for M:\\n\\tsize mismatch for w."))
    'Error(s) in loading state_dict for M: size mismatch for w.'
    """
    return " ".join(str(exc).split())


def load_checkpoint(
    path: str | Path, *, model: nn.Module, optimizer: torch.optim.Optimizer, tokenizer: TokenizerStamp
) -> dict[str, Any]:
    """Load the checkpoint at ``path`` into ``model`` and ``optimizer`` (resized to its rows) and
    return its training position; :class:`CheckpointMismatch` when it was trained with another
    tokenizer version than ``tokenizer`` (another lineage, or other contents under its number)."""
    # On the CPU: torch.set_rng_state takes a CPU ByteTensor (a GPU's resume crashed), and
    # load_state_dict copies each tensor to its parameter's device (Adam's step stays on the CPU).
    data = read_checkpoint(path, keys=RESUMED_KEYS)
    theirs = TokenizerStamp(**data["tokenizer"])
    if theirs.lineage != tokenizer.lineage or theirs.sha256 != tokenizer.sha256:
        raise CheckpointMismatch(
            f"{path} was trained with tokenizer {theirs.lineage} version {theirs.version} "
            f"(sha256 {theirs.sha256[:12]}), not {tokenizer.lineage} version {tokenizer.version} "
            f"(sha256 {tokenizer.sha256[:12]}): load it with that version, then apply the diff from it"
        )
    rows = model.get_input_embeddings().weight.shape[0]
    if data["rows"] < rows:
        raise CheckpointMismatch(
            f"{path} has {data['rows']} embedding rows, fewer than the model's {rows}: build the model with as many"
        )
    if data["rows"] > rows:  # the vocabulary grew while it trained
        grow(model, optimizer, data["rows"])
    try:
        model.load_state_dict(data["model"])
        optimizer.load_state_dict(data["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointMismatch(f"{path} does not fit the model: {state_dict_error(exc)}") from None
    set_removed(model, data["removed"])
    torch.set_rng_state(data["rng"])
    if data["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(data["cuda_rng"])
    return data["position"]
