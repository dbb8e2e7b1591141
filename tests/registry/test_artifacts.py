"""The local artifact store: concurrent writers of one blob, and what a killed writer leaves."""

import os
import threading
import time

from registry.artifacts import STALE_STAGING_SECONDS, LocalArtifactStore, artifact_name


def test_threads_writing_the_same_blob_at_once_all_succeed(tmp_path):
    """Identical rollbacks or publishes at once write one artifact from many threads of a process."""
    store, data = LocalArtifactStore(tmp_path), os.urandom(1 << 20)
    barrier, names, errors = threading.Barrier(32), [], []

    def put() -> None:
        barrier.wait()
        try:
            names.append(store.put(data))
        except Exception as exc:  # noqa: BLE001 - the test reports any
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and names == [artifact_name(data)] * 32
    assert store.get(names[0]) == data
    assert [p.name for p in tmp_path.rglob(".*")] == []  # no staging file left


def test_staging_files_a_killed_writer_left_are_removed_when_a_store_opens(tmp_path):
    store = LocalArtifactStore(tmp_path)
    name = store.put(b"kept")
    folder = store.path(name).parent
    stale, fresh = folder / f".{'0' * 62}.1.x.tmp", folder / f".{'1' * 62}.2.y.tmp"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"being written")
    old = time.time() - STALE_STAGING_SECONDS - 60
    os.utime(stale, (old, old))
    reopened = LocalArtifactStore(tmp_path)
    assert not stale.exists() and fresh.exists()  # a live writer's file is left alone
    assert reopened.get(name) == b"kept"
