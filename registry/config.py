"""The registry's settings, from the environment (``TOKMAINT_REGISTRY_*``) or arguments: where
its database and artifacts are (``RegistryStoreSettings``: the server, ``registry migrate``,
``gc`` and ``relay``), the server's (``RegistrySettings``) and a client's (``RegistryClientSettings``:
the URL and the write token).

A writable server needs a bearer token (``TOKMAINT_REGISTRY_TOKEN``); without one it refuses to
start unless ``insecure_dev`` says writes may go unauthenticated. A bad setting fails at start,
not at the first request.
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, field_validator, model_validator

from tokenizer_service.settings import Settings, SettingsConfigDict

PLACEHOLDER_TOKENS = {"", "changeme", "change-me", "secret", "token", "password"}


class RegistryStoreSettings(Settings):
    """Where the registry keeps its versions: a SQLAlchemy URL and an artifact folder."""

    model_config = SettingsConfigDict(env_prefix="TOKMAINT_REGISTRY_")

    db: str = Field(
        "sqlite:///tokmaint-registry/registry.db",
        description="SQLAlchemy URL: SQLite (embedded) or postgresql+psycopg2://user@host/db",
    )
    artifacts: str = Field("tokmaint-registry/artifacts", description="artifact directory")

    @field_validator("db")
    @classmethod
    def _postgres_url(cls, db: str) -> str:
        """Heroku's and libpq's ``postgres://`` spelling, in SQLAlchemy's words."""
        return "postgresql+psycopg2://" + db.removeprefix("postgres://") if db.startswith("postgres://") else db


class RegistryClientSettings(Settings):
    """A client's registry: its URL, and the bearer token that authorises writes."""

    model_config = SettingsConfigDict(env_prefix="TOKMAINT_REGISTRY_")

    url: str | None = None
    token: str | None = None


class RegistrySettings(RegistryStoreSettings):
    """The server's: where it keeps versions, its write token and its limits."""

    token: str | None = None
    insecure_dev: bool = False
    max_upload_mb: float = Field(64.0, gt=0)
    # A model folder's upload (its weights included), in MB.
    max_model_mb: float = Field(2048.0, gt=0)
    # Files in a model folder (a request on a models repository costs the same whatever it holds).
    max_model_files: int = Field(256, ge=1)
    max_page: int = Field(1000, ge=1)
    max_watch_seconds: float = Field(60.0, ge=0)
    # Requests served at once; one more is answered 503 with Retry-After (registry.api.in_flight).
    max_in_flight: int = Field(64, ge=1)
    # Of those, what one client (its peer address; its bearer token, where it sends one) may hold;
    # None: a quarter of max_in_flight.
    max_in_flight_per_client: int | None = Field(None, ge=1)
    # Watches waiting at once (counted apart: they wait, and hold no worker).
    max_watches: int = Field(256, ge=1)
    # Of those, what one client may hold (counted as max_in_flight_per_client is); None: a quarter.
    max_watches_per_client: int | None = Field(None, ge=1)
    # Seconds a response may wait for the client to read it before it is given up (its connection closed).
    send_timeout: float = Field(30.0, gt=0)
    # Seconds a request body may go without a byte, and the bytes a second it must average once
    # that grace has passed (0: no floor), before it is answered 408.
    receive_timeout: float = Field(15.0, gt=0)
    min_upload_kib_per_second: float = Field(64.0, ge=0)
    # Artifacts kept in memory for downloads, in MB; one over a sixteenth of it (a model's
    # weights) is streamed from the store instead.
    cache_mb: float = Field(256.0, gt=0)
    # Parsed versions held for the next publish's checks, in vocabulary tokens (two versions at least).
    cache_tokens: int = Field(1_000_000, ge=0)
    # Run the tokenizers library's checks of an upload in a process beside the server's own
    # checks (False: in the server, one after the other).
    check_process: bool = True
    # The longest input a version's generated tokenizer_config.json names (the Hub protocol's);
    # None: transformers' own "no limit".
    model_max_length: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _writes_need_a_token(self) -> Self:
        if self.token is not None and self.token.strip().lower() in PLACEHOLDER_TOKENS:
            raise ValueError("TOKMAINT_REGISTRY_TOKEN is a placeholder; set a real secret")
        if self.token is None and not self.insecure_dev:
            raise ValueError(
                "TOKMAINT_REGISTRY_TOKEN is unset: set it, or start with --insecure-dev to accept "
                "unauthenticated writes (development only)"
            )
        return self

    @model_validator(mode="after")
    def _shares_within_their_limits(self) -> Self:
        for share, limit in (("max_in_flight_per_client", "max_in_flight"), ("max_watches_per_client", "max_watches")):
            if getattr(self, share) is not None and getattr(self, share) > getattr(self, limit):
                raise ValueError(
                    f"TOKMAINT_REGISTRY_{share.upper()} ({getattr(self, share)}) is over "
                    f"TOKMAINT_REGISTRY_{limit.upper()} ({getattr(self, limit)})"
                )
        return self

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

    @property
    def max_model_bytes(self) -> int:
        return int(self.max_model_mb * 1024 * 1024)
