"""schemas/json_values.py: timestamps and records as the corpus reader and the stream read them."""

import pytest

from schemas.json_values import json_object, parse_timestamp


@pytest.mark.parametrize(
    "value, reason",
    [
        (2021, "'ts' must be an ISO-8601 string, got a number"),
        ("yesterday", "'ts' is not an ISO-8601 time: 'yesterday'"),
        ("2021-13", "'ts' is not an ISO-8601 time: '2021-13'"),
        ("0001-01-01T00:00:00+01:00", "'ts' is out of range in UTC"),
    ],
)
def test_a_timestamp_that_is_no_time_in_utc_is_refused_saying_why(value, reason):
    with pytest.raises(ValueError) as refused:
        parse_timestamp(value)
    assert str(refused.value).startswith(reason)


def test_a_month_and_padded_text_are_read_as_utc():
    assert parse_timestamp(" 2021-05 ").isoformat() == "2021-05-01T00:00:00+00:00"


@pytest.mark.parametrize(
    "line, reason",
    [
        ('{"text": "a", "text": "b"}', "key 'text' appears twice"),
        ('{"text": "a"', "not JSON ("),
        ("[" * 100_000 + "]" * 100_000, "not JSON tokmaint can read (nested too deeply)"),
        ('"a"', "expected a JSON object, got a string"),
    ],
)
def test_a_record_that_is_not_one_object_of_unique_keys_is_refused(line, reason):
    with pytest.raises(ValueError) as refused:
        json_object(line)
    assert reason in str(refused.value)
