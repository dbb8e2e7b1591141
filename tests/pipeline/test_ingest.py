"""``tokmaint ingest`` against a real Kafka-protocol broker: every document arrives keyed by its
id, in time order per partition, and bad records land in the dead-letter topic with the reason,
the file and the line; documented = sent + dead-lettered, exactly."""

import gzip
import json

from schemas.document import decode_document
from tests.conftest import consume
from tokmaint.cli import main
from tokenizer_service.corpus import read_corpus


def _headers(record) -> dict[str, str]:
    return {name: value.decode() for name, value in record.headers}


def test_a_corpus_arrives_whole_and_bad_records_are_dead_lettered(broker, drifting_corpus, tmp_path, capsys):
    lines = gzip.open(drifting_corpus, "rt").read().splitlines()
    bad = ['{"ts": "2020-01-01T00:00:00", "text": null}', "not json", '{"ts": "2020-01-01T00:00:01"}']
    path = tmp_path / "with-bad.jsonl"
    path.write_text(
        "\n".join(
            lines[:100]
            + bad[:1]
            + lines[100:200]
            + bad[1:]
            + lines[200:]
            + [json.dumps({"ts": "2020-01-01T01:00:00", "text": "x" * 5000})]
        )
        + "\n"
    )
    assert (
        main(
            [
                "ingest",
                str(path),
                "--bootstrap",
                broker,
                "--topic",
                "docs.a",
                "--dlq-topic",
                "docs.a.dlq",
                "--max-record-bytes",
                "4096",
                "--skip-bad",
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert (report["documents"], report["dead_lettered"]) == (len(lines), len(bad) + 1)

    records = consume(broker, "docs.a", expected=len(lines))
    docs = [decode_document(r.value) for r in records]
    assert len(docs) == len(lines) and all(r.key.decode() == d.id for r, d in zip(records, docs))
    assert sorted(d.text for d in docs) == sorted(d.text for d in read_corpus(drifting_corpus))
    assert len({d.id for d in docs}) == len(docs) and {d.source for d in docs} == {"with-bad.jsonl"}
    for partition in {r.partition for r in records}:  # a partition keeps time order
        times = [d.ts for r, d in zip(records, docs) if r.partition == partition]
        assert times == sorted(times)

    dead = consume(broker, "docs.a.dlq", expected=len(bad) + 1)
    by_reason = {_headers(r)["tokmaint.reason"]: r for r in dead}
    assert len(dead) == len(bad) + 1
    null_text = by_reason["'text' must be a string, got null"]
    assert null_text.value.decode().strip() == bad[0] and _headers(null_text)["tokmaint.line"] == "101"
    assert _headers(null_text)["tokmaint.source"] == "with-bad.jsonl"
    assert any(reason.startswith("not JSON") for reason in by_reason)
    too_large = next(r for reason, r in by_reason.items() if reason.startswith("larger than the limit"))
    assert len(too_large.value) == 4096 < int(_headers(too_large)["tokmaint.bytes"])  # cut to the limit, size said


def test_the_same_corpus_gets_the_same_ids(broker, drifting_corpus, capsys):
    for topic in ("docs.b1", "docs.b2"):
        assert main(["ingest", str(drifting_corpus), "--bootstrap", broker, "--topic", topic, "--json"]) == 0
    first, second = (sorted(r.key for r in consume(broker, t, expected=600)) for t in ("docs.b1", "docs.b2"))
    assert first == second and len(set(first)) == 600


def test_a_bad_corpus_without_skip_bad_sends_nothing(broker, tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"ts": "2020", "text": "fine"}\nnot json\n')
    assert main(["ingest", str(path), "--bootstrap", broker, "--topic", "docs.c"]) == 2
    assert "bad.jsonl:2: not JSON" in capsys.readouterr().err
    assert consume(broker, "docs.c", expected=1, timeout=1) == []


def test_documents_dated_outside_the_event_time_window_are_dead_lettered_with_the_reason(broker, tmp_path, capsys):
    """Dated 2099 or 9999 (more than --max-future-seconds ahead of the clock), before 1970 or at
    the epoch (which a Kafka client would stamp with the clock): each is dead-lettered with a
    reason that says so, and the ordinary documents are sent."""
    dated = ["2021-05-04T10:00:00Z", "2099-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "1960-06-01", "1970-01-01T00:00Z"]
    path = tmp_path / "dated.jsonl"
    path.write_text("".join(json.dumps({"ts": ts, "text": f"dated {ts}"}) + "\n" for ts in dated))
    argv = ["ingest", str(path), "--bootstrap", broker, "--topic", "docs.d", "--dlq-topic", "docs.d.dlq", "--json"]
    assert main([*argv, "--max-future-seconds", "3600"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["documents"], report["dead_lettered"]) == (1, 4)
    assert [decode_document(r.value).text for r in consume(broker, "docs.d", expected=1)] == [
        "dated 2021-05-04T10:00:00Z"
    ]
    reasons = {decode_document(r.value).text: _headers(r)["tokmaint.reason"] for r in consume(broker, "docs.d.dlq", 4)}
    assert sorted(reasons) == sorted(f"dated {ts}" for ts in dated[1:])
    assert (
        "ts 2099-01-01T00:00:00+00:00 is more than 3,600 s (--max-future-seconds) ahead" in reasons["dated " + dated[1]]
    )
    assert "ts 9999-12-31T23:59:59+00:00 is more than 3,600 s" in reasons["dated " + dated[2]]
    assert reasons["dated 1960-06-01"].startswith("ts 1960-06-01T00:00:00+00:00 is not after the epoch")
    assert reasons["dated 1970-01-01T00:00Z"].startswith("ts 1970-01-01T00:00:00+00:00 is not after the epoch")
