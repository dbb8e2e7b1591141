"""The session's servers (``tests.servers``) are what the header says: containers of the stand-in
images, published on loopback only, wherever an engine answers."""

from urllib.parse import urlparse

import pytest

from tests.servers import IMAGES, local_reason, pytest_report_header


def test_the_servers_are_stand_in_containers_on_loopback_where_an_engine_answers(
    broker, redis_url, postgres_server, request
):
    header = pytest_report_header(request.config)
    reason = local_reason()
    if reason is not None:
        assert header == f"servers: local binaries ({reason})"
        return
    import docker

    assert header.startswith("servers: containers of the stand-in images")
    ports = {
        "broker": int(broker.rsplit(":", 1)[1]),
        "redis": urlparse(redis_url).port,
        "postgres": urlparse(postgres_server.replace("+psycopg2", "")).port,
    }
    client = docker.from_env()
    try:
        published = {
            int(binding["HostPort"]): (binding["HostIp"], container.image.tags)
            for container in client.containers.list()
            for bindings in container.ports.values()
            for binding in bindings or []
        }
    finally:
        client.close()
    for server, port in ports.items():
        assert port in published, f"{server} on {port} is no container"
        host, tags = published[port]
        assert host == "127.0.0.1" and IMAGES[server] in tags


@pytest.mark.parametrize("choice", ["docker", "Containers"])
def test_an_unknown_choice_of_servers_is_refused_by_name(monkeypatch, choice):
    from tokenizer_service.errors import TokmaintError

    monkeypatch.setenv("TOKMAINT_TEST_SERVERS", choice)
    local_reason.cache_clear()
    try:
        with pytest.raises(TokmaintError, match=f"TOKMAINT_TEST_SERVERS='{choice}': must be one of containers, local"):
            local_reason()
    finally:
        local_reason.cache_clear()
