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


def test_a_server_whose_port_was_taken_meanwhile_starts_on_another(tmp_path, monkeypatch):
    """The port is free when chosen; when another process binds it before the server does, the
    server exits and is started again on another port."""
    import socket

    import httpx

    from registry import local_server

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = iter([port, local_server.free_port()])
        monkeypatch.setattr(local_server, "free_port", lambda: next(ports))
        process, url = start_server(tmp_path, env={"TOKMAINT_REGISTRY_TOKEN": TOKEN})
    try:
        assert not url.endswith(f":{port}")
        assert httpx.get(f"{url}/healthz").status_code == 200
        assert "address already in use" in (tmp_path / "server.log").read_text()
    finally:
        process.terminate()
        process.wait(timeout=30)
