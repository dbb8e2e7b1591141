"""registry.config: the registry's settings, checked when they are made."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from registry.config import RegistrySettings, RegistryStoreSettings
from registry.local_server import free_port


def test_a_postgres_url_is_spelled_for_sqlalchemy() -> None:
    assert RegistryStoreSettings(db="postgres://tok@db/registry").db == "postgresql+psycopg2://tok@db/registry"
    assert RegistryStoreSettings(db="sqlite:///r.db").db == "sqlite:///r.db"


def test_a_writable_server_needs_a_real_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOKMAINT_REGISTRY_TOKEN", raising=False)
    with pytest.raises(ValidationError, match="TOKMAINT_REGISTRY_TOKEN is unset"):
        RegistrySettings()
    with pytest.raises(ValidationError, match="placeholder"):
        RegistrySettings(token="changeme")
    assert RegistrySettings(insecure_dev=True).token is None


def test_a_share_over_its_limit_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"PER_CLIENT \(9\) is over TOKMAINT_REGISTRY_MAX_IN_FLIGHT"):
        RegistrySettings(insecure_dev=True, max_in_flight=8, max_in_flight_per_client=9)


def test_a_writable_server_needs_a_token():
    env = {k: v for k, v in os.environ.items() if k != "TOKMAINT_REGISTRY_TOKEN"}
    result = subprocess.run(
        [sys.executable, "-m", "tokmaint.cli", "registry", "serve", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "tokmaint: error: TOKMAINT_REGISTRY_TOKEN is unset: set it, or start with "
        "--insecure-dev to accept unauthenticated writes (development only)"
    ]
