"""Property tests: any bytes or JSON given as a corpus or as a tokenizer.json give a result or the
typed error (CorpusError / InvalidTokenizer), never another exception and never a hang."""

import contextlib
import gzip
import json
import signal

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import edit_tokenizer_model
from tests.support.tokenizer_files import HAND_EDITS
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import read_corpus
from tokenizer_service.errors import CorpusError, InvalidTokenizer
from tokenizer_service.residue_audit import ResidueOptions, audit_residues
from tokenizer_service.validation import load_tokenizer

SECONDS_PER_EXAMPLE = 10
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)


@contextlib.contextmanager
def time_bound(seconds: int = SECONDS_PER_EXAMPLE):
    """Fail an example that runs longer than ``seconds`` (a hang would never finish)."""

    def expire(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def read_or_refuse(path, **options):
    with time_bound():
        try:
            return read_corpus(path, **options)
        except CorpusError as error:
            assert error.path == path and error.reason and "\n" not in str(error)
            return None


def load_or_refuse(path, **options):
    with time_bound():
        try:
            return load_tokenizer(path, **options)
        except InvalidTokenizer as error:
            assert error.reasons and all(error.reasons)
            return None


@EXAMPLES
@given(
    data=st.binary(max_size=2000),
    name=st.sampled_from(["c.jsonl", "c.txt", "c.jsonl.gz"]),
    packed=st.booleans(),
    cut=st.integers(0, 50),
    skip_bad=st.booleans(),
)
def test_any_bytes_as_a_corpus(tmp_path, data, name, packed, cut, skip_bad):
    if packed:
        data = gzip.compress(data)
        data = data[: len(data) - cut] if cut else data
    path = tmp_path / name
    path.write_bytes(data)
    corpus = read_or_refuse(path, skip_bad=skip_bad)
    if corpus is not None:
        assert len(corpus) > 0 and all(isinstance(d.text, str) for d in corpus)


@EXAMPLES
@given(
    records=st.lists(
        json_values
        | st.fixed_dictionaries({"text": json_values}, optional={"ts": json_values})
        | st.fixed_dictionaries({"text": st.text(max_size=20)}, optional={"ts": st.datetimes().map(str)}),
        min_size=1,
        max_size=8,
    ),
    skip_bad=st.booleans(),
)
def test_any_json_lines_as_a_corpus(tmp_path, records, skip_bad):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    corpus = read_or_refuse(path, skip_bad=skip_bad)
    event("refused" if corpus is None else "read")
    if corpus is not None:
        good = [r for r in records if isinstance(r, dict) and isinstance(r.get("text"), str)]
        assert len(corpus) + len(corpus.skipped) == len(records) and len(corpus) <= len(good)
        times = [d.ts for d in corpus]
        assert times == sorted(times) if all(times) else not any(times)


@EXAMPLES
@given(data=st.binary(max_size=3000) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_or_json_as_a_tokenizer(tmp_path, data):
    path = tmp_path / "tokenizer.json"
    path.write_bytes(data)
    for allow_invalid in (False, True):
        load_or_refuse(path, allow_invalid=allow_invalid)


@pytest.fixture(scope="module")
def valid_tokenizer_json():
    return json.loads(BPETokenizer.train(["low lower lowest newer wider", "ab abc abd"] * 3, vocab_size=275).to_json())


def _mutate(data, path_choices, value, action):
    """Replace, delete or add at one place of a tokenizer.json (chosen by index into its paths)."""
    places = []

    def walk(node, trail):
        places.append(trail)
        if isinstance(node, dict):
            for k, v in list(node.items())[:40]:
                walk(v, trail + [k])
        elif isinstance(node, list):
            for k, v in enumerate(node[:40]):
                walk(v, trail + [k])

    walk(data, [])
    trail = places[path_choices % len(places)]
    if not trail:
        return value
    parent = data
    for key in trail[:-1]:
        parent = parent[key]
    key = trail[-1]
    if action == "delete":
        del parent[key]
    elif action == "add" and isinstance(parent, dict):
        parent[str(value)[:8]] = value
    elif action == "add":
        parent.append(value)
    else:
        parent[key] = value
    return data


@EXAMPLES
@given(
    where=st.integers(0, 10**6),
    value=json_values | st.integers(-5, 400) | st.text(max_size=4),
    action=st.sampled_from(["replace", "delete", "add"]),
    more=st.integers(0, 2),
)
def test_mutated_tokenizers_load_or_are_refused_and_loaded_ones_work(
    tmp_path, valid_tokenizer_json, where, value, action, more
):
    data = json.loads(json.dumps(valid_tokenizer_json))
    for k in range(more + 1):
        data = _mutate(data, where // (k + 1), json.loads(json.dumps(value)), action)
    load_and_audit(tmp_path, data)


def load_and_audit(tmp_path, data):
    """Save ``data`` as a tokenizer.json: the loader refuses it, or it encodes losslessly and
    survives a whole residue audit."""
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    tokenizer = load_or_refuse(path)
    event("refused" if tokenizer is None else "loaded")
    if tokenizer is None:
        return
    texts = ["low lower lowest", "ab abc abd abx", "newer wider 12 ü"]
    with time_bound(30):
        assert [tokenizer.decode(ids) for ids in tokenizer.encode_batch(texts)] == texts
        audit = audit_residues(tokenizer, texts, ResidueOptions(r=0.5, s=3.0))
    assert audit.summary["lossless"] is True


@EXAMPLES
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(HAND_EDITS),
            st.integers(0, 10**4),
            st.integers(0, 10**4),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_hand_edited_tokenizers_load_or_are_refused_and_loaded_ones_work(tmp_path, valid_tokenizer_json, edits):
    data = json.loads(json.dumps(valid_tokenizer_json))
    for edit, a, b in edits:
        data = edit_tokenizer_model(data, edit, a, b)
    load_and_audit(tmp_path, data)
