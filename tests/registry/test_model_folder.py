"""A model folder's checks (``registry.model_folder``) against the libraries that will read it:
a safetensors header read alone says what the ``safetensors`` library says of the whole file,
and the config's names are transformers' own."""

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import load, save

from registry.model_folder import ACTIVATIONS, MAX_HEADER_BYTES, safetensors_tensors


def test_the_activation_names_are_transformers_own():
    from transformers.activations import ACT2FN

    assert sorted(ACTIVATIONS) == sorted(ACT2FN)


def _with_header(data: bytes, edit) -> bytes:
    """``data`` (a safetensors file) with its header JSON edited by ``edit``."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    edit(header)
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data[8 + length :]


def _set(name: str, key: str, value):
    return lambda header: header[name].__setitem__(key, value)


@pytest.mark.parametrize(
    "case, edit",
    [
        ("an unknown dtype", _set("a", "dtype", "F33")),
        ("bytes for another shape", _set("a", "shape", [2, 4])),
        ("a gap between tensors", _set("b", "data_offsets", [28, 40])),
        ("overlapping tensors", _set("b", "data_offsets", [20, 32])),
        ("a negative size", _set("a", "shape", [-2, 3])),
        ("offsets past the file", _set("b", "data_offsets", [24, 48])),
        ("no object", lambda header: header.__setitem__("a", [1])),
    ],
)
def test_a_header_read_alone_refuses_what_the_library_refuses_of_the_file(case, edit):
    """The header's tensors are what the library loads from the whole file; every file the
    library refuses is refused from its header."""
    data = save(
        {
            "a": np.ones((2, 3), dtype=np.float32),
            "b": np.zeros((3,), dtype=np.float32),
            "c": np.arange(4, dtype=np.int64),
        },
        metadata={"format": "pt"},
    )
    loaded = load(data)
    assert safetensors_tensors(data) == {
        name: (dtype, array.shape) for (name, array), dtype in zip(sorted(loaded.items()), ("F32", "F32", "I64"))
    }
    broken = _with_header(data, edit)
    with pytest.raises(Exception):
        load(broken)
    with pytest.raises(ValueError):
        safetensors_tensors(broken)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 7,
        struct.pack("<Q", 100) + b"{}",
        struct.pack("<Q", 2) + b"[]",
        struct.pack("<Q", 5) + b"{nan}",
        struct.pack("<Q", 2) + b"\xff\xfe",
    ],
)
def test_bytes_that_are_no_safetensors_file_are_refused(data):
    with pytest.raises(Exception):
        load(data)
    with pytest.raises(ValueError):
        safetensors_tensors(data)


def test_a_header_past_the_bound_is_not_parsed():
    """A header declared longer than ``MAX_HEADER_BYTES`` is refused by its length alone."""
    data = struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{" + b" " * MAX_HEADER_BYTES
    with pytest.raises(ValueError, match="at most"):
        safetensors_tensors(data)
