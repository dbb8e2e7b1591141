"""The pipeline's settings: where the stream and its statistics live, and how the job steps
through it. Each is an option of the commands that use it and can be set from the environment
(``TOKMAINT_PIPELINE_*``; the Kafka and Redis addresses every part shares, ``TOKMAINT_KAFKA`` and
``TOKMAINT_REDIS``).

>>> settings = PipelineSettings(bootstrap="kafka:9092", docs_topic="docs.news")
>>> settings.bootstrap, settings.docs_topic, settings.dlq_topic
('kafka:9092', 'docs.news', 'docs.dlq')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from pydantic import model_validator

from schemas.document import DEFAULT_MAX_BYTES, DEFAULT_MAX_FUTURE_SECONDS
from schemas.revision import REVISIONS_TOPIC
from tokenizer_service.settings import Number, Settings, SettingsConfigDict, setting, whole

if TYPE_CHECKING:
    from registry.api.in_flight import Limits


class PipelineSettings(Settings):
    """Where the stream and its statistics live, and how the job steps through it."""

    # By name in code (``bootstrap=``), by the shared variable in the environment (TOKMAINT_KAFKA).
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_PIPELINE_", populate_by_name=True)

    bootstrap: str = setting("127.0.0.1:9092", None, "Kafka bootstrap servers", env="TOKMAINT_KAFKA")
    redis: str = setting(
        "redis://127.0.0.1:6379/0",
        None,
        "Redis URL, of a server or of any node of a Redis Cluster",
        env="TOKMAINT_REDIS",
    )
    docs_topic: str = setting("docs", None, "the documents' topic", option="topic")
    dlq_topic: str = setting("docs.dlq", None, "the dead-letter topic")
    revisions_topic: str = setting(REVISIONS_TOPIC, None, "the registry's revision events' topic")
    max_record_bytes: int = setting(DEFAULT_MAX_BYTES, whole(1), "larger records are dead-lettered")
    max_future_seconds: float = setting(
        DEFAULT_MAX_FUTURE_SECONDS,
        Number(float, low=0, high=1e9),
        "a document dated more than this many seconds ahead of the clock, or not after 1970, is dead-lettered "
        "(at ingest and in the jobs): counted, it would move the stream's event time past the documents to come",
    )
    # How the job steps through the stream (``PipelineJob``): ``pipeline run``'s options.
    commit_steps: int = setting(
        16,
        whole(1),
        "steps counted between writes to Redis, at most (a revision, another version and an idle topic write at "
        "once; a crash repeats the steps not written)",
    )
    step_seconds: float | None = setting(
        None,
        Number(float, low=0, low_open=True),
        "a step is one window of this many seconds of event time (aligned to the epoch) instead of --step-docs "
        "documents, which then stands for a window's documents on average (it turns the horizon, interval and "
        "warmup into steps)",
    )
    max_step_docs: int = setting(
        100_000,
        whole(1),
        "with --step-seconds, the most documents a step holds (a fuller window goes on in the next step; a step's "
        "texts are held in memory)",
    )
    dedupe_steps: int = setting(
        100,
        whole(0),
        "a document whose id came within this many steps before is a producer's resend, counted once (0: count "
        "every record); the ids of the window are kept with the statistics",
    )


class IngestServerSettings(Settings):
    """``ingest-server``'s limits: what it serves at once, what a request may hold, and how long a
    slow client may take (``TOKMAINT_INGEST_*``, or the command's options).

    >>> limits = IngestServerSettings(max_in_flight=8, min_upload_kib_per_second=1).limits
    >>> limits.requests, limits.per_client, limits.min_upload_rate
    (8, 2, 1024.0)
    """

    model_config = SettingsConfigDict(env_prefix="TOKMAINT_INGEST_")

    max_in_flight: int = setting(64, whole(1), "requests served at once; one more is answered 503 with Retry-After")
    max_in_flight_per_client: int | None = setting(
        None,
        whole(1),
        "of those, what one client (its address; its token) may hold; unset: a quarter of --max-in-flight",
    )
    max_records: int = setting(10_000, whole(1), "records a request may hold; one with more is refused whole, 413")
    send_timeout: float = setting(
        30.0,
        Number(float, low=0, low_open=True),
        "seconds a response the client does not read waits before it is given up",
    )
    receive_timeout: float = setting(
        15.0,
        Number(float, low=0, low_open=True),
        "seconds a request body may send nothing, or its line and headers may take, before it is answered 408",
    )
    min_upload_kib_per_second: float = setting(
        64.0,
        Number(float, low=0),
        "past --receive-timeout, a body must average this rate or be answered 408; 0: no floor",
    )

    @model_validator(mode="after")
    def _share_within_its_limit(self) -> Self:
        if self.max_in_flight_per_client is not None and self.max_in_flight_per_client > self.max_in_flight:
            raise ValueError(
                f"max_in_flight_per_client must be at most max_in_flight ({self.max_in_flight}), "
                f"got {self.max_in_flight_per_client}"
            )
        return self

    @property
    def limits(self) -> Limits:
        """These limits as the HTTP layer (``registry.api.in_flight``) takes them."""
        from registry.api.in_flight import Limits

        return Limits(
            requests=self.max_in_flight,
            per_client=self.max_in_flight_per_client,
            send_timeout=self.send_timeout,
            receive_timeout=self.receive_timeout,
            min_upload_rate=self.min_upload_kib_per_second * 1024,
        )
