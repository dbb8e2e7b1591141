"""The registry tests' shared fixtures: a real uvicorn server (``tokmaint registry serve`` on a
free loopback port) and a lineage of revisions to publish to it."""

import pytest

from registry.local_server import start_server
from tests.conftest import tedtok_lineage
from tests.support.registry_server import TOKEN


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A registry server on SQLite in a temporary directory, 1 MB upload limit, watches ≤ 3 s."""
    root = tmp_path_factory.mktemp("registry")
    process, url = start_server(
        root,
        env={
            "TOKMAINT_REGISTRY_TOKEN": TOKEN,
            "TOKMAINT_REGISTRY_MAX_UPLOAD_MB": "1",
            "TOKMAINT_REGISTRY_MAX_WATCH_SECONDS": "3",
        },
    )
    yield url
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def revisions():
    return tedtok_lineage(seed=300, steps=20, lineage="news")
