"""A ``tokenizer.json`` read and checked as a file before a model is built from it: JSON read so
that objects remember the keys they held twice, the file's shape (duplicate keys, depth), and
every problem of its BPE model (ids, vocabulary, merges), each a reason of its own.

    >>> data = parse_json('{"model": {"type": "BPE", "vocab": {"a": 0, "a": 1}, "merges": []}}')
    >>> list(json_shape_problems(data))
    ["model.vocab: key 'a' appears more than once"]
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterator
from itertools import chain, starmap
from pathlib import Path
from typing import Any

from schemas.json_values import JSONObject, json_kind
from tokenizer_service.errors import InvalidTokenizer

# Real tokenizer.json files nest under ten levels; a deeper one is refused before any code
# recurses into it (copy.deepcopy fails near 500).
MAX_JSON_DEPTH = 64

# Ids index embedding rows and per-id arrays, so an id of 10**9 would allocate gigabytes. The
# largest real vocabularies hold ~262k tokens; 4M leaves room for years of holes.
MAX_ID_SPACE = 1 << 22


def parse_json(text: str | bytes, *, source: str | Path | None = None) -> Any:
    """JSON as tokmaint reads tokenizer files: objects remember keys they held twice, and
    anything unreadable is an :class:`InvalidTokenizer` with the reason.

    >>> parse_json('{"a": 1, "a": 2}').duplicates
    ('a',)
    """
    try:
        return json.loads(text, object_pairs_hook=JSONObject.from_pairs)
    except json.JSONDecodeError as exc:
        raise InvalidTokenizer(
            [f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"], source=source
        ) from None
    except ValueError as exc:  # e.g. an integer of thousands of digits, or bytes that are not UTF-8
        raise InvalidTokenizer([f"not JSON tokmaint can read ({str(exc)[:80]})"], source=source) from None
    except RecursionError:
        raise InvalidTokenizer(["JSON nested too deeply"], source=source) from None


def _examples(items: list[Any], what: str, path: str) -> str:
    """One reason for a list of offending items: count plus the first three."""
    return f"{path}: {len(items)} {what}, e.g. {', '.join(items[:3])}"


def json_shape_problems(data: Any) -> Iterator[str]:
    """Every key a JSON object held twice, by its JSON path, and a part nested deeper than
    ``MAX_JSON_DEPTH`` (walked without recursion: nothing later recurses into a deep file).

    >>> list(json_shape_problems(json.loads('{"m": {"a": 1, "a": 2}}', object_pairs_hook=JSONObject.from_pairs)))
    ["m: key 'a' appears more than once"]
    >>> deep = {}
    >>> for _ in range(100):
    ...     deep = {"x": deep}
    >>> list(json_shape_problems({"normalizer": deep}))[0][:50]
    'normalizer.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x'
    """
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            yield f"{path}: nested more than {MAX_JSON_DEPTH} levels deep (tokenizer.json files nest a few)"
            return
        if isinstance(value, dict):
            for key in getattr(value, "duplicates", ()):
                yield f"{path or '(top level)'}: key {key!r} appears more than once"
            children = []
            for key, child in value.items():
                child_path = f"{path}.{key}" if path else key
                if path == "model" and key in ("vocab", "merges"):
                    # Ids and pairs of strings (checked on their own): no need to walk 100k+ of them.
                    for duplicate in getattr(child, "duplicates", ()):
                        yield f"{child_path}: key {duplicate!r} appears more than once"
                elif isinstance(child, (dict, list)):
                    children.append((child, child_path, depth + 1))
            stack.extend(reversed(children))
        elif isinstance(value, list):
            stack.extend(
                reversed(
                    [
                        (child, f"{path}[{k}]", depth + 1)
                        for k, child in enumerate(value)
                        if isinstance(child, (dict, list))
                    ]
                )
            )


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _valid_unicode(text: str) -> bool:
    """False for strings holding lone surrogates (JSON allows the escape, UTF-8 cannot encode it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _vocab_problems(vocab: dict[Any, Any]) -> list[str]:
    """Problems of ``model.vocab``: ids that are not whole numbers in [0, MAX_ID_SPACE), ids
    shared by two tokens, tokens that are not valid Unicode.

    >>> _vocab_problems({"a": 0, "b": 1})
    []
    >>> _vocab_problems({"a": 0, "b": True, "c": 0})
    ["model.vocab: 1 ids that are not whole numbers, e.g. 'b': a boolean", "model.vocab: 1 ids given to two \
tokens, e.g. 0 ('a', 'c')"]
    """
    ids = vocab.values()
    # The usual all-clear in a few C-level passes (publishes check 50k+ tokens); the pass
    # below only runs to name the problems.
    if (
        set(map(type, ids)) <= {int}
        and (not ids or (min(ids) >= 0 and max(ids) < MAX_ID_SPACE))
        and len(set(ids)) == len(vocab)
        and _valid_unicode("".join(vocab))
    ):
        return []
    reasons = []
    not_ids = [f"{t!r}: {json_kind(i)}" for t, i in vocab.items() if not _is_id(i)]
    negative = [f"{t!r}: {i}" for t, i in vocab.items() if _is_id(i) and i < 0]
    too_large = [f"{t!r}: {i}" for t, i in vocab.items() if _is_id(i) and i >= MAX_ID_SPACE]
    bad_text = [f"{t.encode('utf-8', 'backslashreplace').decode()!r}" for t in vocab if not _valid_unicode(t)]
    for items, what in (
        (not_ids, "ids that are not whole numbers"),
        (negative, "negative ids"),
        (too_large, f"ids of {MAX_ID_SPACE:,} or more"),
        (bad_text, "tokens that are not valid Unicode (lone surrogates)"),
    ):
        if items:
            reasons.append(_examples(items, what, "model.vocab"))
    holders: dict[int, str] = {}
    shared = []
    for token, i in vocab.items():
        if _is_id(i):
            if i in holders:
                shared.append(f"{i} ({holders[i]!r}, {token!r})")
            holders.setdefault(i, token)
    if shared:
        reasons.append(_examples(shared, "ids given to two tokens", "model.vocab"))
    return reasons


def _merge_problems(merges: list[Any], vocab: dict[Any, Any]) -> list[str]:
    """Problems of ``model.merges``: entries that are not ``"a b"`` or ``["a", "b"]``, and merges
    that name or produce tokens outside the vocabulary.

    >>> _merge_problems([["a", "b"], "a b"], {"a": 0, "b": 1, "ab": 2})
    []
    >>> _merge_problems([["a", "c"], "b", ["b", "a"]], {"a": 0, "b": 1, "ab": 2})
    ['model.merges: 1 merges that are not "a b" or ["a", "b"], e.g. [1] "b"', 'model.merges: 1 merges name \
tokens outside the vocabulary, e.g. [0] ["a", "c"]', 'model.merges: 1 merges produce tokens outside the \
vocabulary, e.g. [2] ba']
    """
    kinds = set(map(type, merges))
    pairs = merges if kinds <= {list} else [m.split(" ", 1) for m in merges] if kinds <= {str} else None
    if pairs is not None and set(map(len, pairs)) <= {2} and set(map(type, chain.from_iterable(pairs))) <= {str}:
        parts = set(chain.from_iterable(pairs))
        if "" not in parts and parts <= vocab.keys() and all(map(vocab.__contains__, starmap(operator.add, pairs))):
            return []  # the usual all-clear, in C-level passes
    malformed, outside, products = [], [], []
    for k, merge in enumerate(merges):
        pair = merge.split(" ", 1) if isinstance(merge, str) else merge
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) and p for p in pair)):
            malformed.append(f"[{k}] {json.dumps(merge)[:40]}")
        elif pair[0] not in vocab or pair[1] not in vocab:
            outside.append(f"[{k}] {json.dumps(pair, ensure_ascii=False)[:60]}")
        elif pair[0] + pair[1] not in vocab:
            products.append(f"[{k}] {pair[0] + pair[1]}")
    return [
        _examples(items, what, "model.merges")
        for items, what in (
            (malformed, 'merges that are not "a b" or ["a", "b"]'),
            (outside, "merges name tokens outside the vocabulary"),
            (products, "merges produce tokens outside the vocabulary"),
        )
        if items
    ]


def tokenizer_json_problems(data: Any) -> list[str]:
    """Every structural problem of a parsed ``tokenizer.json`` for a BPE model, by JSON path.

    >>> tokenizer_json_problems([1, 2])
    ['the top level must be a JSON object, got a list']
    >>> tokenizer_json_problems({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": ["a b"]}})
    ["model.vocab: 1 ids given to two tokens, e.g. 0 ('a', 'b')", 'model.merges: 1 merges produce tokens \
outside the vocabulary, e.g. [0] ab']
    """
    if not isinstance(data, dict):
        return [f"the top level must be a JSON object, got {json_kind(data)}"]
    reasons = list(json_shape_problems(data))
    model = data.get("model")
    if not isinstance(model, dict):
        return reasons + [f"model: must be an object, got {'nothing' if model is None else json_kind(model)}"]
    if model.get("type", "BPE") != "BPE":
        reasons.append(f"model.type: {model.get('type')!r}; tokmaint maintains BPE tokenizers only")
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        reasons.append(
            f"model.vocab: must be an object of token -> id, got {'nothing' if vocab is None else json_kind(vocab)}"
        )
        vocab = {}
    reasons += _vocab_problems(vocab)
    merges = model.get("merges")
    if not isinstance(merges, list):
        reasons.append(f"model.merges: must be a list, got {'nothing' if merges is None else json_kind(merges)}")
        merges = []
    reasons += _merge_problems(merges, vocab)
    added = data.get("added_tokens", [])
    if not isinstance(added, list):
        reasons.append(f"added_tokens: must be a list, got {json_kind(added)}")
        added = []
    bad_added = [
        f"[{k}]"
        for k, t in enumerate(added)
        if not (
            isinstance(t, dict)
            and isinstance(t.get("content"), str)
            and t["content"]
            and _valid_unicode(t["content"])
            and _is_id(t.get("id"))
            and 0 <= t["id"] < MAX_ID_SPACE
        )
    ]
    if bad_added:
        reasons.append(
            _examples(
                bad_added, f"entries without a non-empty 'content' and an 'id' in [0, {MAX_ID_SPACE:,})", "added_tokens"
            )
        )
    elif added:
        holders: dict[int, str] = {}
        for token, i in vocab.items():
            if _is_id(i):
                holders.setdefault(i, token)
        clashes = []
        for k, t in enumerate(added):
            held, content = holders.get(t["id"]), t["content"]
            if held is not None and held != content:
                clashes.append(f"[{k}] {content!r} has id {t['id']}, which model.vocab gives to {held!r}")
            elif content in vocab and vocab[content] != t["id"]:
                clashes.append(f"[{k}] {content!r} has id {t['id']}, but model.vocab gives it {vocab[content]}")
        if clashes:
            reasons.append(_examples(clashes, "added tokens clash with the vocabulary", "added_tokens"))
    for option, allowed, why in (
        ("dropout", (None, 0, 0.0), "encoding would be random"),
        ("continuing_subword_prefix", (None, ""), "merges would not concatenate their tokens"),
        ("end_of_word_suffix", (None, ""), "merges would not concatenate their tokens"),
    ):
        if model.get(option) not in allowed:
            reasons.append(f"model.{option}: {json.dumps(model[option])[:40]} is not supported ({why})")
    return reasons
