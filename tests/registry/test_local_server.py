"""registry/local_server.py: a registry server of its own, for the benchmarks and tests."""

import pytest

from registry.local_server import start_server
from tests.support.registry_server import TOKEN


def test_a_local_server_logs_to_a_file_and_a_failed_start_shows_it(tmp_path):
    """``start_server`` sends the server's output to ``server.log`` (never a pipe nobody reads)."""
    from tokenizer_service.errors import TokmaintError

    with pytest.raises(TokmaintError) as failed:
        start_server(
            tmp_path / "bad", env={"TOKMAINT_REGISTRY_TOKEN": TOKEN, "TOKMAINT_REGISTRY_MAX_UPLOAD_MB": "lots"}
        )
    assert "server.log" in str(failed.value) and "MAX_UPLOAD_MB" in str(failed.value).upper()
    assert (tmp_path / "bad" / "server.log").stat().st_size > 0
