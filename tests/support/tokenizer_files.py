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
