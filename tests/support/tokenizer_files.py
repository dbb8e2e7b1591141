"""tokenizer.json files for the loader's tests: saved, edited copies, compact JSON."""

import json


def save(tmp_path, data, name="tokenizer.json"):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return path


def edited(good, edit):
    data = json.loads(json.dumps(good))
    edit(data)
    return data


def compact(data) -> str:
    return json.dumps(data, separators=(",", ":"))


# The hand edits of a tokenizer.json that tests.conftest's edit_tokenizer_model makes, by name:
# those of its model, and all of them (one more marks a token special).
MODEL_EDITS = (
    "drop merge",
    "repeat merge",
    "swap merges",
    "swap ids",
    "move id into a hole",
    "drop token",
    "add token",
    "ignore_merges",
)
HAND_EDITS = (*MODEL_EDITS, "special token")
