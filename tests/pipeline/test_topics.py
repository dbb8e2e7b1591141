"""pipeline/topics.py: a dead-letter record's value and headers."""

from pipeline.topics import dead_letter, dead_letter_headers


def test_a_record_within_the_limit_goes_as_it_came_with_no_size_header():
    value, headers = dead_letter(b'{"id": 1', "not JSON", limit=8, source="docs")
    assert value == b'{"id": 1'
    assert headers == [("tokmaint.reason", b"not JSON"), ("tokmaint.source", b"docs")]


def test_a_record_over_the_limit_is_cut_and_says_its_size():
    value, headers = dead_letter("é".encode() * 6, "too large", limit=5, source="http docs", line=2)
    assert value == b"\xc3\xa9\xc3\xa9\xc3"  # bytes cut, not characters: the record as it came
    assert dict(headers)["tokmaint.bytes"] == b"12" and dict(headers)["tokmaint.line"] == b"2"


def test_a_record_from_a_topic_names_its_partition_and_offset_and_no_line():
    headers = dead_letter_headers("not a Document: 'text' is required", source="docs", partition=3, offset=0)
    assert headers == [
        ("tokmaint.reason", b"not a Document: 'text' is required"),
        ("tokmaint.source", b"docs"),
        ("tokmaint.partition", b"3"),
        ("tokmaint.offset", b"0"),
    ]
