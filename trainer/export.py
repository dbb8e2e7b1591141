"""``tokmaint trainer export``: a checkpoint as a Hugging Face model folder, loaded by
``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained``: ``config.json``
(with ``bos_token_id``), ``model.safetensors``, the version's ``tokenizer.json`` and a
``tokenizer_config.json``. The byte-level commands (``tokmaint eval``, ``tokmaint generate``)
read such folders.

    export_model("out/trainer/checkpoint.pt", "model-v12")

The folder is written beside its place and renamed into it: a crash leaves the old one or the new
one, never half of one. Ids the lineage removed keep zero rows (the trainer's −inf on their logits
is a hook, not a weight: an exported model scores them as any row of zeros).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import TokmaintError
from tokenizer_service.hub_files import BOS_TOKENS, bos_token_id, special_tokens_map, tokenizer_config
from tokenizer_service.output_dir import fsync_directory
from trainer.apply_revision import set_removed

def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """A trainer checkpoint's contents (on the CPU), refused with the reason when it is none."""
    path = Path(path)
    if not path.is_file():
        raise TokmaintError(f"no checkpoint at {path}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: torch's own words
        raise TokmaintError(f"{path} is no trainer checkpoint: {exc}") from None
    if not isinstance(data, dict) or "model" not in data or "tokenizer" not in data:
        raise TokmaintError(f"{path} is no trainer checkpoint (no model or tokenizer version in it)")
    return data


def checkpoint_model(checkpoint: str | Path, *, tokenizer_json: str | None = None,
                     bos_id: int | None = None) -> tuple[GPT2LMHeadModel, BPETokenizer, dict[str, Any]]:
    """The checkpoint's model (bos and eos set in its config), its tokenizer version and its
    stamp. ``tokenizer_json``: the version's, for a checkpoint that does not hold it;
    ``bos_id``: the context a text starts from, when the version has no special token for it."""
    data = read_checkpoint(checkpoint)
    text = tokenizer_json or data.get("tokenizer_json")
    if text is None:
        raise TokmaintError(f"{checkpoint} does not hold its tokenizer version (an older checkpoint): give its "
                            "tokenizer.json with --tokenizer")
    tokenizer = BPETokenizer.from_json(text)
    stamp = data["tokenizer"]
    if tokenizer.sha256 != stamp["sha256"]:
        raise TokmaintError(f"the tokenizer given is not the one {checkpoint} was trained with ({stamp['lineage']} "
                            f"version {stamp['version']}, sha256 {stamp['sha256'][:12]})")
    rows = data["rows"]
    bos = bos_id if bos_id is not None else bos_token_id(tokenizer)
    if bos is None:
        raise TokmaintError(f"{stamp['lineage']} version {stamp['version']} has no special token to start a text "
                            f"from ({', '.join(BOS_TOKENS)}): give one id with --bos-id")
    if not 0 <= bos < rows:
        raise TokmaintError(f"--bos-id {bos} is no row of the model (0 to {rows - 1})")
    config = GPT2Config(**{**data.get("config", {}), "vocab_size": rows, "bos_token_id": bos, "eos_token_id": bos})
    model = GPT2LMHeadModel(config)
    model.load_state_dict(data["model"])
    set_removed(model, data.get("removed", []))  # as the trainer scores it (an exported folder cannot hold this)
    return model, tokenizer, {**stamp, "removed": data.get("removed", [])}


def export_model(checkpoint: str | Path, out: str | Path, *, tokenizer_json: str | None = None,
                 bos_id: int | None = None) -> dict[str, Any]:
    """Write the checkpoint's model as a Hugging Face folder at ``out`` (replaced whole when it
    is one tokmaint exported already); what was written (``checkpoint_model``'s options)."""
    model, tokenizer, stamp = checkpoint_model(checkpoint, tokenizer_json=tokenizer_json, bos_id=bos_id)
    return write_model_folder(model, tokenizer, stamp, out)


def write_model_folder(model: GPT2LMHeadModel, tokenizer: BPETokenizer, stamp: dict[str, Any], out: str | Path, *,
                       extra: Callable[[Path], None] | None = None) -> dict[str, Any]:
    """``model`` (its config's ``bos_token_id`` set) and its version as a Hugging Face folder at
    ``out``, with ``stamp`` (lineage, version) in ``tokmaint.json`` and what ``extra`` writes
    into the folder; the folder is staged beside ``out`` and renamed into place, replacing one
    tokmaint wrote, never anything else."""
    bos, config = model.config.bos_token_id, model.config
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(staging)
        (staging / "tokenizer.json").write_bytes(tokenizer.to_json_bytes())
        (staging / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(
            tokenizer, model_max_length=config.n_positions, bos_id=bos), indent=2), encoding="utf-8")
        (staging / "special_tokens_map.json").write_text(json.dumps(special_tokens_map(tokenizer, bos_id=bos),
                                                                    indent=2), encoding="utf-8")
        (staging / "tokmaint.json").write_text(json.dumps(stamp, indent=2), encoding="utf-8")
        if extra is not None:
            extra(staging)
        for path in staging.iterdir():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        if out.exists():
            if not (out / "tokmaint.json").is_file():
                raise TokmaintError(f"{out} exists and is no folder tokmaint exported: choose another --out")
            shutil.rmtree(out)
        staging.rename(out)
        fsync_directory(out.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {"out": str(out), "lineage": stamp.get("lineage"), "version": stamp.get("version"), "rows": config.vocab_size,
            "bos_token_id": bos, "files": sorted(p.name for p in out.iterdir())}


def load_model(path: str | Path, *,
               device: str | None = None) -> tuple[torch.nn.Module, BPETokenizer, dict[str, Any]]:
    """A Hugging Face model folder (``tokmaint trainer export``'s: the model, its
    ``tokenizer.json`` and its config's ``bos_token_id``) or a trainer checkpoint, on ``device``
    (default: CUDA when there is one), in eval mode, with its tokenizer version and its stamp
    (lineage and version; empty for a folder tokmaint did not write)."""
    path = Path(path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if path.is_file():
        model, tokenizer, stamp = checkpoint_model(path)
        return model.to(device).eval(), tokenizer, stamp
    from transformers import AutoModelForCausalLM

    if not (path / "tokenizer.json").is_file() or not (path / "config.json").is_file():
        raise TokmaintError(f"{path} is neither a trainer checkpoint nor a model folder (config.json, the weights "
                            "and tokenizer.json: tokmaint trainer export writes one)")
    model = AutoModelForCausalLM.from_pretrained(path)
    if model.config.bos_token_id is None:
        raise TokmaintError(f"{path}/config.json has no bos_token_id: the context the model's text starts from")
    tokenizer = BPETokenizer.from_json((path / "tokenizer.json").read_text(encoding="utf-8"),
                                       source=path / "tokenizer.json")
    written = path / "tokmaint.json"
    stamp = json.loads(written.read_text(encoding="utf-8")) if written.is_file() else {}
    return model.to(device).eval(), tokenizer, stamp
