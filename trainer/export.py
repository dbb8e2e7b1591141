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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import TokmaintError
from tokenizer_service.hub_files import BOS_TOKENS, bos_token_id, special_tokens_map, tokenizer_config
from tokenizer_service.output_dir import file_set_marker, write_file_set
from trainer.apply_revision import set_removed
from trainer.checkpoint import read_checkpoint, state_dict_error

STAMP = "tokmaint.json"  # the lineage, version and sha256 of the tokenizer the model was trained with


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' bars for writing and loading a folder's weights (a line of stderr each time, for
    a model the command reads or writes in a moment) are off while inside."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def checkpoint_model(
    checkpoint: str | Path, *, tokenizer_json: str | None = None, bos_id: int | None = None
) -> tuple[GPT2LMHeadModel, BPETokenizer, dict[str, Any]]:
    """The checkpoint's model (bos and eos set in its config), its tokenizer version and its
    stamp. ``tokenizer_json``: the version's, for a checkpoint that does not hold it;
    ``bos_id``: the context a text starts from, when the version has no special token for it."""
    data = read_checkpoint(checkpoint)
    text = tokenizer_json or data.get("tokenizer_json")
    if text is None:
        raise TokmaintError(
            f"{checkpoint} does not hold its tokenizer version (an older checkpoint): give its "
            "tokenizer.json with --tokenizer"
        )
    tokenizer = BPETokenizer.from_json(text)
    stamp = data["tokenizer"]
    if tokenizer.sha256 != stamp["sha256"]:
        raise TokmaintError(
            f"the tokenizer given is not the one {checkpoint} was trained with ({stamp['lineage']} "
            f"version {stamp['version']}, sha256 {stamp['sha256'][:12]})"
        )
    rows = data["rows"]
    bos = bos_id if bos_id is not None else bos_token_id(tokenizer)
    if bos is None:
        raise TokmaintError(
            f"{stamp['lineage']} version {stamp['version']} has no special token to start a text "
            f"from ({', '.join(BOS_TOKENS)}): give one id with --bos-id"
        )
    if not 0 <= bos < rows:
        raise TokmaintError(f"--bos-id {bos} is not a row of the model (0 to {rows - 1})")
    if tokenizer.id_space > rows:
        raise TokmaintError(
            f"{checkpoint}: its tokenizer has ids up to {tokenizer.id_space - 1}, more than the model's {rows} rows"
        )
    try:
        config = GPT2Config(**{**data.get("config", {}), "vocab_size": rows, "bos_token_id": bos, "eos_token_id": bos})
        model = GPT2LMHeadModel(config)
        model.load_state_dict(data["model"])
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TokmaintError(f"{checkpoint}: its weights do not fit its model config: {state_dict_error(exc)}") from None
    set_removed(model, data.get("removed", []))  # as the trainer scores it (an exported folder cannot hold this)
    return model, tokenizer, {**stamp, "removed": data.get("removed", [])}


def export_model(
    checkpoint: str | Path, out: str | Path, *, tokenizer_json: str | None = None, bos_id: int | None = None
) -> dict[str, Any]:
    """Write the checkpoint's model as a Hugging Face folder at ``out`` (:func:`write_model_folder`);
    what was written (``checkpoint_model``'s options)."""
    model, tokenizer, stamp = checkpoint_model(checkpoint, tokenizer_json=tokenizer_json, bos_id=bos_id)
    return write_model_folder(model, tokenizer, stamp, out)


def write_model_folder(
    model: GPT2LMHeadModel,
    tokenizer: BPETokenizer,
    stamp: dict[str, Any],
    out: str | Path,
    *,
    extra: Callable[[Path], None] | None = None,
) -> dict[str, Any]:
    """``model`` (its config's ``bos_token_id`` set) and its version as a Hugging Face folder at
    ``out``, with ``stamp`` (lineage, version) in ``tokmaint.json`` and what ``extra`` writes
    into the folder (``tokenizer_service.output_dir.write_file_set``: a new folder is renamed into
    place whole; in one tokmaint wrote, its files are replaced and a user's files kept)."""
    bos, config = model.config.bos_token_id, model.config

    def write(folder: Path) -> None:
        with _no_progress_bars():
            model.save_pretrained(folder)
        write_tokenizer_files(folder, tokenizer, stamp, model_max_length=config.n_positions, bos_id=bos)
        if extra is not None:
            extra(folder)

    # Folders exported before the marker are recognised by their tokmaint.json.
    files = write_file_set(out, write, command="trainer export", legacy=STAMP)
    return {
        "out": str(out),
        "lineage": stamp.get("lineage"),
        "version": stamp.get("version"),
        "rows": config.vocab_size,
        "bos_token_id": bos,
        "files": files,
    }


def write_tokenizer_files(
    folder: Path,
    tokenizer: BPETokenizer,
    stamp: dict[str, Any],
    *,
    model_max_length: int | None = None,
    bos_id: int | None = None,
) -> None:
    """A version's files beside a model's weights in ``folder``: ``tokenizer.json``,
    ``tokenizer_config.json`` and ``special_tokens_map.json`` (``AutoTokenizer.from_pretrained``
    reads them), and ``stamp`` (lineage, version) with the version's sha256 in ``tokmaint.json``.
    ``bos_id``: the model's context to start texts from (by default the version's own).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> tok = BPETokenizer.train(["ab ab"], vocab_size=258, special_tokens=["<|endoftext|>"])
    >>> write_tokenizer_files(folder, tok, {"lineage": "news", "version": 3})
    >>> sorted(p.name for p in folder.iterdir())
    ['special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json', 'tokmaint.json']
    >>> json.loads((folder / "tokmaint.json").read_text())["sha256"] == tok.sha256
    True
    """
    (folder / "tokenizer.json").write_bytes(tokenizer.to_json_bytes())
    (folder / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(tokenizer, model_max_length=model_max_length, bos_id=bos_id), indent=2),
        encoding="utf-8",
    )
    (folder / "special_tokens_map.json").write_text(
        json.dumps(special_tokens_map(tokenizer, bos_id=bos_id), indent=2), encoding="utf-8"
    )
    (folder / STAMP).write_text(json.dumps({**stamp, "sha256": tokenizer.sha256}, indent=2), encoding="utf-8")


def check_model_folder(path: Path) -> tuple[BPETokenizer, dict[str, Any]]:
    """A model folder's tokenizer and stamp, once the folder is checked whole before any weight
    is read: ``config.json`` makes a model whose tensors are the ones ``model.safetensors``
    holds, shape for shape; the config has a ``bos_token_id`` among its rows; ``tokenizer.json``
    is a valid version with no more ids than the model has rows; ``tokmaint.json``, when there,
    is an object whose ``sha256`` is the folder's tokenizer's (another lineage's tokenizer.json
    of the same size would be scored silently otherwise); the export into it finished. A
    :class:`TokmaintError` names every reason."""
    from safetensors import SafetensorError, safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    reasons: list[str] = []
    rows = tokenizer = stamp = None
    try:
        marker = file_set_marker(path)
        if marker is not None and not marker.get("complete", True):
            reasons.append("an export into it did not finish (run it again)")
    except TokmaintError as exc:
        reasons.append(str(exc))
    try:
        config = AutoConfig.from_pretrained(path)
        with torch.device("meta"):  # shapes only: no memory, no time
            made = AutoModelForCausalLM.from_config(config)
        expected = {k: tuple(v.shape) for k, v in made.state_dict().items()}
        # Tied weights (GPT-2's output layer is its embedding) are saved once.
        tied = set(made._tied_weights_keys or ()) if getattr(config, "tie_word_embeddings", False) else set()
        rows = config.vocab_size
        bos = config.bos_token_id
        if not isinstance(bos, int) or not 0 <= bos < rows:
            reasons.append(
                f"config.json's bos_token_id is {bos}, not one of the model's {rows} rows (the context "
                "its text starts from)"
            )
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        reasons.append(f"config.json is not a model config: {' '.join(str(exc).split())}")
        expected = None
    weights = path / "model.safetensors"
    if weights.is_file():
        try:
            with safe_open(str(weights), "pt") as f:
                found = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        except (SafetensorError, OSError) as exc:
            reasons.append(f"model.safetensors is truncated or corrupt ({' '.join(str(exc).split())})")
            found = None
        if expected is not None and found is not None:
            missing = [k for k in expected if k not in found and k not in tied]
            wrong = [
                f"{k} {list(found[k])} where config.json makes {list(shape)}"
                for k, shape in expected.items()
                if k in found and found[k] != shape
            ]
            if missing:
                reasons.append(
                    f"model.safetensors lacks {len(missing)} tensors config.json's model has (e.g. {missing[0]})"
                )
            if wrong:
                reasons.append(
                    f"model.safetensors disagrees with config.json: {'; '.join(wrong[:3])}"
                    + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else "")
                )
    try:
        tokenizer = BPETokenizer.from_json(
            (path / "tokenizer.json").read_text(encoding="utf-8"), source=path / "tokenizer.json"
        )
        if rows is not None and tokenizer.id_space > rows:
            reasons.append(f"tokenizer.json has ids up to {tokenizer.id_space - 1}, more than the model's {rows} rows")
    except TokmaintError as exc:
        reasons.append(str(exc))
    except UnicodeDecodeError as exc:
        reasons.append(f"tokenizer.json is not UTF-8 text (byte {exc.start})")
    if (path / STAMP).is_file():
        try:
            stamp = json.loads((path / STAMP).read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            stamp = None
        if not isinstance(stamp, dict):
            reasons.append(f"{STAMP} is not a JSON object")
            stamp = {}
        elif tokenizer is not None and stamp.get("sha256", tokenizer.sha256) != tokenizer.sha256:
            reasons.append(
                f"tokenizer.json is not the version the model was trained with ({STAMP}: "
                f"{stamp.get('lineage')} version {stamp.get('version')}, sha256 "
                f"{str(stamp['sha256'])[:12]}; tokenizer.json's: {tokenizer.sha256[:12]})"
            )
    if reasons:
        raise TokmaintError(f"{path} is not a model folder tokmaint can use: {'; '.join(reasons)}")
    return tokenizer, stamp or {}


def load_model(path: str | Path, *, device: str | None = None) -> tuple[torch.nn.Module, BPETokenizer, dict[str, Any]]:
    """A Hugging Face model folder (``tokmaint trainer export``'s: the model, its
    ``tokenizer.json`` and its config's ``bos_token_id``, checked by :func:`check_model_folder`)
    or a trainer checkpoint, on ``device`` (default: CUDA when there is one), in eval mode, with
    its tokenizer version and its stamp (lineage, version, sha256; empty for a folder tokmaint
    did not write)."""
    path = Path(path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if path.is_file():
        model, tokenizer, stamp = checkpoint_model(path)
        return model.to(device).eval(), tokenizer, stamp
    from transformers import AutoModelForCausalLM

    if not (path / "tokenizer.json").is_file() or not (path / "config.json").is_file():
        raise TokmaintError(
            f"{path} is neither a trainer checkpoint nor a model folder (config.json, the weights "
            "and tokenizer.json: tokmaint trainer export writes one)"
        )
    tokenizer, stamp = check_model_folder(path)
    try:
        with _no_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(path)
    except (OSError, ValueError, RuntimeError) as exc:  # weights in another form than model.safetensors
        raise TokmaintError(f"{path}: its weights do not load: {' '.join(str(exc).split())}") from None
    return model.to(device).eval(), tokenizer, stamp
