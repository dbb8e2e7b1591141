"""The corpus reader: good inputs in every format, and every bad input as a CorpusError with file and line."""

import gzip
import json
from datetime import datetime, timezone

import pytest

from schemas.json_values import parse_timestamp
from tokenizer_service.corpus import batches, read_corpus
from tokenizer_service.errors import CorpusError


def jsonl(*records) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records)


def write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "name, data, texts",
    [
        ("plain.jsonl", jsonl({"ts": "2020-01-02", "text": "b"}, {"ts": "2020-01-01", "text": "a"}), ["a", "b"]),
        (
            "packed.jsonl.gz",
            gzip.compress(jsonl({"ts": "2020-01-02", "text": "b"}, {"ts": "2020", "text": "a"}), mtime=0),
            ["a", "b"],
        ),
        # gzip is recognised by its bytes, not its name
        ("named-plain.jsonl", gzip.compress(jsonl({"text": "x"}), mtime=0), ["x"]),
        ("lines.txt", b"first doc\r\n\n  \nsecond doc\n", ["first doc", "second doc"]),
        ("old-mac.txt", b"one\rtwo\r\rthree", ["one", "two", "three"]),
        ("lines.txt.gz", gzip.compress(b"one\ntwo", mtime=0), ["one", "two"]),
        # without 'ts' file order is time order; other fields are ignored
        ("untimed.jsonl", jsonl({"text": "z", "id": 1}, {"text": "y", "source": "web"}), ["z", "y"]),
        ("bom.jsonl", b"\xef\xbb\xbf" + jsonl({"text": "with BOM"}), ["with BOM"]),
        ("crlf.jsonl", b'{"text": "a"}\r\n\r\n{"text": ""}\r\n', ["a", ""]),
        ("unicode.jsonl", jsonl({"text": "naïve 中文 🙂"}), ["naïve 中文 🙂"]),
    ],
)
def test_good_corpora_are_read(tmp_path, name, data, texts):
    corpus = read_corpus(write(tmp_path, name, data))
    assert corpus.texts == texts and corpus.skipped == []


def test_times_are_sorted_in_utc_not_as_strings(tmp_path):
    records = [
        {"ts": "2021-01-01T23:30:00Z", "text": "third"},
        {"ts": "2021-01-02T01:00:00+02:00", "text": "second"},  # 23:00 UTC: a string sort puts it last
        {"ts": "2021-01-01T12:00:00", "text": "first"},  # no offset: UTC
        {"ts": "2021-01-02T00:45:00+01:00", "text": "second too"},  # 23:45 UTC
    ]
    corpus = read_corpus(write(tmp_path, "tz.jsonl", jsonl(*records)))
    assert corpus.texts == ["first", "second", "third", "second too"]
    assert corpus[0].ts == datetime(2021, 1, 1, 12, tzinfo=timezone.utc)
    assert all(d.ts.tzinfo == timezone.utc for d in corpus)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("2021-05-04T10:00:00+02:00", datetime(2021, 5, 4, 8, tzinfo=timezone.utc)),
        ("2021-05-04T10:00:00Z", datetime(2021, 5, 4, 10, tzinfo=timezone.utc)),
        ("2021-05-04 10:00", datetime(2021, 5, 4, 10, tzinfo=timezone.utc)),
        ("2021-05-04", datetime(2021, 5, 4, tzinfo=timezone.utc)),
        ("2021-05", datetime(2021, 5, 1, tzinfo=timezone.utc)),
        ("2021", datetime(2021, 1, 1, tzinfo=timezone.utc)),
    ],
)
def test_timestamps_parse_alike_with_and_without_spaces_around(value, expected):
    """The one-call path (a bare ISO time) and the other (spaces stripped, a year or month
    completed) agree."""
    assert parse_timestamp(value) == parse_timestamp(f" {value}\n") == expected


@pytest.mark.parametrize("value", ["", " ", "20210", "2021-5", "x2021", "2021-05-04T25:00", "0001-01-01T00:00+01:00"])
def test_bad_timestamps_are_refused(value):
    with pytest.raises(ValueError, match="'ts' is"):
        parse_timestamp(value)


def test_equal_times_keep_file_order(tmp_path):
    path = write(tmp_path, "ties.jsonl", jsonl(*({"ts": "2020-01-01T00:00:00Z", "text": str(i)} for i in range(20))))
    assert read_corpus(path).texts == [str(i) for i in range(20)]


def test_the_hash_identifies_the_content_not_the_compression(tmp_path):
    data = jsonl({"text": "a"}, {"text": "b"})
    plain, packed = write(tmp_path, "a.jsonl", data), write(tmp_path, "a.jsonl.gz", gzip.compress(data, mtime=0))
    other = write(tmp_path, "b.jsonl", jsonl({"text": "a"}, {"text": "c"}))
    assert read_corpus(plain).sha256 == read_corpus(packed).sha256 != read_corpus(other).sha256


BAD = [
    # name, content, line, reason
    (
        "truncated.jsonl.gz",
        gzip.compress(jsonl(*({"text": "x" * 50 + str(i)} for i in range(200))), mtime=0)[:-30],
        None,
        "corrupt or truncated gzip",
    ),
    ("corrupt.jsonl.gz", b"\x1f\x8b\x08\x00" + b"\x00garbage" * 20, None, "corrupt or truncated gzip"),
    ("latin1.jsonl", jsonl({"text": "ok"}) + '{"text": "caf\xe9"}\n'.encode("latin-1"), 2, "not UTF-8 (byte 0xe9"),
    ("number.jsonl", jsonl({"text": 42}), 1, "'text' must be a string, got a number"),
    ("null.jsonl", jsonl({"text": "ok"}, {"text": None}), 2, "'text' must be a string, got null"),
    ("list.jsonl", jsonl({"text": ["a", "b"]}), 1, "'text' must be a string, got a list"),
    ("missing.jsonl", jsonl({"body": "a"}), 1, "no 'text' field"),
    ("array.jsonl", jsonl(["ts", "text"]), 1, "expected a JSON object with 'text', got a list"),
    ("broken.jsonl", jsonl({"text": "a"}, b'{"text": "b"'), 2, "not JSON"),
    ("ts-word.jsonl", jsonl({"ts": "yesterday", "text": "a"}), 1, "'ts' is not an ISO-8601 time: 'yesterday'"),
    ("ts-number.jsonl", jsonl({"ts": 1612345678, "text": "a"}), 1, "'ts' must be an ISO-8601 string, got a number"),
    ("ts-month-13.jsonl", jsonl({"ts": "2020-13-01", "text": "a"}), 1, "not an ISO-8601 time"),
    (
        "ts-missing.jsonl",
        jsonl({"ts": "2020-01-01", "text": "a"}, {"text": "b"}),
        2,
        "no 'ts' field, but earlier records have one",
    ),
    ("ts-late.jsonl", jsonl({"text": "a"}, {"ts": "2020-01-01", "text": "b"}), 2, "earlier records have none"),
    (
        "ts-overflow.jsonl",
        jsonl({"ts": "0001-01-01T00:00:00+01:00", "text": "a"}),
        1,
        "'ts' is out of range in UTC: '0001-01-01T00:00:00+01:00'",
    ),
    ("deep.jsonl", jsonl({"text": "a"}) + b"[" * 100_000 + b"\n", 2, "not JSON tokmaint can read (nested too deeply)"),
    ("twice.jsonl", b'{"text": "a", "text": "b"}\n', 1, "key 'text' appears twice"),
    ("empty.jsonl", b"", None, "no documents"),
    ("blank.txt", b"\n  \n\n", None, "no documents"),
]


@pytest.mark.parametrize("name, data, line, reason", BAD, ids=[b[0] for b in BAD])
def test_bad_corpora_name_file_line_and_reason(tmp_path, name, data, line, reason):
    path = write(tmp_path, name, data)
    with pytest.raises(CorpusError) as caught:
        read_corpus(path)
    error = caught.value
    assert error.path == path and error.line == line and reason in error.reason
    assert str(error).startswith(f"{path}:{line}: " if line else f"{path}: ")
    assert "\n" not in str(error)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(CorpusError, match="corpus not found"):
        read_corpus(tmp_path / "nope.jsonl")
    with pytest.raises(CorpusError, match="is a directory"):
        read_corpus(tmp_path)


def test_skip_bad_skips_counts_and_keeps_the_good(tmp_path):
    path = write(
        tmp_path,
        "mixed.jsonl",
        jsonl(
            {"ts": "2020-01-03", "text": "c"},
            {"ts": "2020-01-01", "text": None},
            b"not json",
            {"ts": "soon", "text": "x"},
            {"ts": "2020-01-02", "text": "b"},
        )
        + b"\xff\xfe\n",
    )
    corpus = read_corpus(path, skip_bad=True)
    assert corpus.texts == ["b", "c"]
    assert [s.split(":")[0] for s in corpus.skipped] == ["line 2", "line 3", "line 4", "line 6"]
    assert "'text' must be a string, got null" in corpus.skipped[0]


def test_skip_bad_still_refuses_a_corpus_with_nothing_good(tmp_path):
    path = write(tmp_path, "bad.jsonl", jsonl({"text": 1}, {"text": 2}))
    with pytest.raises(CorpusError, match=r"no documents \(2 bad records skipped, the first: line 1: 'text'"):
        read_corpus(path, skip_bad=True)


def test_skip_bad_does_not_hide_a_truncated_file(tmp_path):
    data = gzip.compress(jsonl(*({"text": "y" * 40 + str(i)} for i in range(300))), mtime=0)
    with pytest.raises(CorpusError, match="truncated gzip"):
        read_corpus(write(tmp_path, "cut.jsonl.gz", data[: len(data) // 2]), skip_bad=True)


def test_batches_are_time_steps(tmp_path):
    corpus = read_corpus(write(tmp_path, "c.txt", b"a\nb\nc\nd\ne\n"))
    assert list(batches(corpus, 2)) == [["a", "b"], ["c", "d"], ["e"]]
    with pytest.raises(ValueError, match="at least one document"):
        list(batches(corpus, 0))
