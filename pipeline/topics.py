"""The pipeline's Kafka topics and the dead-letter record's headers.

Names and the bootstrap address are configuration (``TOKMAINT_KAFKA``, ``TOKMAINT_PIPELINE_*``,
or options):

* ``docs``: the stream's documents (``schemas/document.schema.json``), keyed by document id;
* ``docs.dlq``: records that are not Documents, as they came, with headers that say why and where
  from (:func:`dead_letter_headers`);
* ``tokenizer.revisions``: the registry's revision events (``registry.relay``).

>>> dead_letter_headers("not JSON (Expecting value at column 1)", source="corpus.jsonl", line=7)
[('tokmaint.reason', b'not JSON (Expecting value at column 1)'), ('tokmaint.source', b'corpus.jsonl'), \
('tokmaint.line', b'7')]
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from registry.relay import TOPIC as REVISIONS_TOPIC
from schemas.document import DEFAULT_MAX_BYTES


class PipelineSettings(BaseSettings):
    """Where the stream and its statistics live, and how the job steps through it; every one can be
    set from the environment."""

    model_config = SettingsConfigDict(env_prefix="TOKMAINT_PIPELINE_", extra="ignore", populate_by_name=True)

    # The one Kafka address every command reads (the registry's relay too).
    bootstrap: str = Field("127.0.0.1:9092", validation_alias="TOKMAINT_KAFKA")
    # Where the statistics live: a redis-server, or any node of a Redis Cluster.
    redis: str = Field("redis://127.0.0.1:6379/0", validation_alias="TOKMAINT_REDIS")
    docs_topic: str = "docs"
    dlq_topic: str = "docs.dlq"
    revisions_topic: str = REVISIONS_TOPIC
    max_record_bytes: int = Field(DEFAULT_MAX_BYTES, ge=1, description="larger records are dead-lettered")
    # How the job steps through the stream (``PipelineJob``): ``pipeline run``'s options.
    commit_steps: int = Field(
        16,
        ge=1,
        description=(
            "steps counted between writes to Redis, at most (a revision, another version and an idle topic write at "
            "once; a crash repeats the steps not written)"
        ),
    )
    step_seconds: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description=(
            "a step is one window of this many seconds of event time (aligned to the epoch) instead of --step-docs "
            "documents, which then stands for a window's documents on average (it turns the horizon, interval and "
            "warmup into steps)"
        ),
    )
    max_step_docs: int = Field(
        100_000,
        ge=1,
        description=(
            "with --step-seconds, the most documents a step holds (a fuller window goes on in the next step; a step's "
            "texts are held in memory)"
        ),
    )
    dedupe_steps: int = Field(
        100,
        ge=0,
        description=(
            "a document whose id came within this many steps before is a producer's resend, counted once (0: count "
            "every record); the ids of the window are kept with the statistics"
        ),
    )


def dead_letter(
    value: bytes, reason: str, *, limit: int, source: str, line: int | None = None
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """A dead-letter record's value and headers: the record itself, cut to ``limit`` bytes when it is
    larger (no topic takes a record above the broker's limit; ``tokmaint.bytes`` gives its size).

    >>> value, headers = dead_letter(b"x" * 10, "too large", limit=4, source="http docs", line=3)
    >>> value, dict(headers)["tokmaint.bytes"]
    (b'xxxx', b'10')
    """
    headers = dead_letter_headers(reason, source=source, line=line)
    if len(value) > limit:
        headers.append(("tokmaint.bytes", str(len(value)).encode("utf-8")))
    return value[:limit], headers


def dead_letter_headers(
    reason: str, *, source: str, line: int | None = None, partition: int | None = None, offset: int | None = None
) -> list[tuple[str, bytes]]:
    """Kafka headers of a dead-letter record: the reason, and where the record came from (a
    file and its line, or a topic with the partition and offset)."""
    headers = [("tokmaint.reason", reason), ("tokmaint.source", source)]
    for name, value in (("line", line), ("partition", partition), ("offset", offset)):
        if value is not None:
            headers.append((f"tokmaint.{name}", str(value)))
    return [(name, value.encode("utf-8")) for name, value in headers]
