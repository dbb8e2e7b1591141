"""Files to publish to the registry: tokenizer variants (valid children of each other, or
refused ones), diffs that lie, and model folders as ``tokmaint trainer export`` writes them."""

import json
import struct

from registry.artifacts import LocalArtifactStore
from registry.db import make_engine
from registry.store import Registry
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.merge_graph import MergeGraph


def lying_diff(diff_json: bytes) -> bytes:
    """A diff with its first entry left out: it no longer matches the tokenizers."""
    data = json.loads(diff_json)
    data["entries"] = data["entries"][1:]
    return json.dumps(data).encode()


def moved_ids(tokenizer: BPETokenizer) -> bytes:
    """``tokenizer`` with two surviving tokens' ids swapped (a child the registry refuses)."""
    vocab = dict(tokenizer.vocab)
    a, b = [t for t in tokenizer.vocab if len(t) > 2][:2]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    return tokenizer.replace_model(vocab=vocab, merges=tokenizer.merges).to_json().encode()


def unreachable_add(tokenizer: BPETokenizer) -> bytes:
    """``tokenizer`` with a sink's id given to a token no merge forms (refused: unreachable)."""
    sink = sorted(MergeGraph(tokenizer).sink_tokens)[0]
    vocab = {t: i for t, i in tokenizer.vocab.items() if t != sink}
    vocab["streamstream"] = tokenizer.vocab[sink]  # no merge forms it
    merges = [m for m in tokenizer.merges if m[0] + m[1] != sink]
    return tokenizer.replace_model(vocab=vocab, merges=merges).to_json().encode()


def variant(base: BPETokenizer, k: int) -> bytes:
    """The base tokenizer with its first sink's id given to a two-letter token of its own per k: any
    variant is a valid child of any other (one reassigned id, everything else in place)."""
    sink = sorted(MergeGraph(base).sink_tokens)[0]
    letters = "abcdefghijklmnopqrstuvwxyz"
    first, second = letters[k // 26 % 26], letters[k % 26]
    vocab = {t: i for t, i in base.vocab.items() if t != sink}
    merges = [m for m in base.merges if m[0] + m[1] != sink]
    if first + second not in vocab:
        vocab[first + second] = base.vocab[sink]
        merges.append((first, second))
    return base.replace_model(vocab=vocab, merges=merges).to_json().encode()


def exported_model(tokenizer: BPETokenizer, stamp: dict, *, rows: int | None = None, **config) -> dict[str, bytes]:
    """A model folder as ``tokmaint trainer export`` writes it, its files by name: a one-layer
    GPT-2 of ``rows`` rows (default: the version's ids) with ``config`` on top."""
    import tempfile
    from pathlib import Path

    from tests.support.models import tiny_model
    from tokenizer_service.output_dir import MARKER
    from trainer.export import write_model_folder

    model = tiny_model(rows or tokenizer.id_space, seed=None, **config)
    with tempfile.TemporaryDirectory() as folder:
        write_model_folder(model, tokenizer, stamp, Path(folder) / "model")
        return {path.name: path.read_bytes() for path in (Path(folder) / "model").iterdir() if path.name != MARKER}


def model_variant(folder: dict[str, bytes], n: int) -> dict[str, bytes]:
    """``folder`` with its last weight set to ``n``: a model that loads as the first does, in
    files of its own.

    >>> import struct
    >>> struct.unpack("<f", model_variant({"model.safetensors": bytes(8)}, 3)["model.safetensors"][-4:])
    (3.0,)
    """
    weights = bytearray(folder["model.safetensors"])
    weights[-4:] = struct.pack("<f", float(n))
    return {**folder, "model.safetensors": bytes(weights)}


def collect_until_stopped(url: str, artifacts: str, started, stop, runs) -> None:
    """``collect_garbage(older_than=0)`` over and over in a process of its own (as `registry gc`
    runs beside the server) until ``stop`` is set; ``runs`` counts the collections."""
    registry = Registry(make_engine(url), LocalArtifactStore(artifacts))
    while not stop.is_set():
        registry.collect_garbage(older_than=0)
        with runs.get_lock():
            runs.value += 1
        started.set()
