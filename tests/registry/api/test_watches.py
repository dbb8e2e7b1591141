"""registry/api/watches.py: one poller wakes the watches."""

import threading
import time

import httpx

from registry.client import RegistryClient
from registry.local_server import free_port
from tests.support.registry_server import TOKEN


def test_idle_watches_share_one_poller_of_the_database_and_wake_on_a_publish(tmp_path, revisions):
    """Forty watches waiting on one lineage (a real uvicorn server in this process, so that a
    SQLAlchemy listener counts its queries): the database is read a handful of times a second
    for all of them, not five times a second for each; /healthz counts them, one past
    max_watches is refused 503, and a publish wakes every one."""
    from concurrent.futures import ThreadPoolExecutor

    import uvicorn
    from sqlalchemy import event

    from registry.api.main import create_app
    from registry.config import RegistrySettings

    initial, made = revisions
    app = create_app(
        RegistrySettings(
            token=TOKEN,
            db=f"sqlite:///{tmp_path / 'registry.db'}",
            artifacts=str(tmp_path / "artifacts"),
            max_watches=40,
            max_watches_per_client=40,
            max_watch_seconds=60,
        )
    )  # one client here: all forty are its
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the in-process server did not start"
        time.sleep(0.05)
    queries: list[float] = []
    event.listen(app.state.registry.engine, "before_cursor_execute", lambda *args: queries.append(time.monotonic()))
    client = RegistryClient(url, token=TOKEN)
    try:
        client.create("watched", initial.to_json())
        with ThreadPoolExecutor(40) as pool:
            before = len(queries)
            watches = [
                pool.submit(
                    httpx.get, f"{url}/v1/tokenizers/watched/watch", params={"after": 1, "timeout": 30}, timeout=60
                )
                for _ in range(40)
            ]
            deadline = time.monotonic() + 30
            while len(queries) - before < 40 * 2:  # each watch's first read of the latest version: two queries
                assert time.monotonic() < deadline, "the watches did not start"
                time.sleep(0.05)
            time.sleep(0.5)
            started, before = time.monotonic(), len(queries)
            time.sleep(2)
            idle_reads_per_second = (len(queries) - before) / (time.monotonic() - started)
            assert idle_reads_per_second <= 15, f"{idle_reads_per_second:.0f} reads/s for 40 idle watches"
            assert not any(watch.done() for watch in watches)
            health = httpx.get(f"{url}/healthz").json()
            assert health["watches"] == 40 and health["in_flight"] == 0, health
            one_more = httpx.get(f"{url}/v1/tokenizers/watched/watch", params={"after": 1, "timeout": 30})
            assert one_more.status_code == 503 and one_more.json()["error_code"] == "overloaded"
            client.publish("watched", made[0].tokenizer.to_json(), diff_json=made[0].diff.to_json())
            answers = [watch.result(timeout=30) for watch in watches]
        assert [(a.status_code, a.json()["number"]) for a in answers] == [(200, 2)] * 40
        assert httpx.get(f"{url}/healthz").json()["watches"] == 0
    finally:
        server.should_exit = True
        thread.join(timeout=30)
