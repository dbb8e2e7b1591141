"""registry/api/routes/tokenizers.py: the REST routes of lineages, versions, aliases and model
folders, through a real uvicorn server and the client library."""

import threading
import time

import httpx
import pytest

from registry.client import RegistryClient, RegistryRefused
from tests.conftest import sentences
from tests.support.registry_server import TOKEN
from tokenizer_service.bpe import BPETokenizer


def test_publish_watch_compose_and_download(server, revisions, tmp_path):
    initial, made = revisions
    client = RegistryClient(server, token=TOKEN, cache_dir=tmp_path / "cache")
    assert client.create("news", initial.to_json()).number == 1
    for revision in made[:-1]:
        client.publish("news", revision.tokenizer.to_json(), diff_json=revision.diff.to_json())
    latest = client.version("news").number
    assert latest == len(made) and [v.number for v in client.versions("news").data] == list(range(1, latest + 1))

    # A watcher of the latest wakes up within a second of the next publish.
    woke: dict = {}

    def watch():
        woke["version"] = client_reader.watch("news", after=latest, timeout=20)
        woke["at"] = time.monotonic()

    client_reader = RegistryClient(server)
    thread = threading.Thread(target=watch)
    thread.start()
    time.sleep(0.5)
    client.publish("news", made[-1].tokenizer.to_json(), diff_json=made[-1].diff.to_json())
    published_at = time.monotonic()
    thread.join(timeout=30)
    assert woke["version"].number == latest + 1 and woke["at"] - published_at < 1.0
    assert client_reader.watch("news", after=latest + 1, timeout=0.5) is None  # 204 on timeout

    # One composed diff equals every diff in turn.
    tokens = dict(BPETokenizer.from_json(client.download("news", 2)).id_to_token)
    composed = dict(tokens)
    for n in range(3, latest + 2):
        for e in client.diff("news", n).entries:
            tokens.pop(e.id, None) if e.new_token is None else tokens.__setitem__(e.id, e.new_token)
    for e in client.composed_diff("news", 2).entries:
        composed.pop(e.id, None) if e.new_token is None else composed.__setitem__(e.id, e.new_token)
    assert tokens == composed == made[-1].tokenizer.id_to_token

    # Downloads carry the sha256 as ETag; revalidation answers 304 with no body.
    info = client.version("news", 3)
    response = httpx.get(f"{server}{info.tokenizer_url}")
    assert response.headers["etag"] == f'"{info.sha256}"'
    assert response.content == made[1].tokenizer.to_json().encode()
    again = httpx.get(f"{server}{info.tokenizer_url}", headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    assert client.download("news", 3) == client.download("news", 3) == response.content
    assert (tmp_path / "cache" / info.sha256).read_bytes() == response.content

    # Aliases and rollback.
    assert client.set_alias("news", "serving", 3).version == 3
    assert client.version("news", "serving").sha256 == info.sha256
    rolled = client.rollback("news", 3)
    assert rolled.kind == "rollback" and rolled.sha256 == info.sha256 and rolled.number == latest + 2
    client.delete_alias("news", "serving")
    with pytest.raises(RegistryRefused) as caught:
        client.version("news", "serving")
    assert caught.value.status == 404 and caught.value.code == "alias_not_found"
    metrics = httpx.get(f"{server}/metrics").text
    assert 'tokmaint_registry_publishes_total{kind="tedtok"}' in metrics
    assert 'route="/v1/tokenizers/{name}/versions/{ref}/tokenizer.json",status="304"' in metrics


def test_a_model_folder_s_tar_holds_regular_files_within_the_limit():
    import io
    import tarfile

    from registry.api.routes.tokenizers import folder_files
    from registry.store import RegistryError

    def tar_of(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:") as tar:
            for info, data in members:
                tar.addfile(info, io.BytesIO(data) if data else None)
        return buffer.getvalue()

    def file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        return info, data

    assert folder_files(tar_of(file("config.json", b"{}"), file("model.safetensors", b"w")), 100) == {
        "config.json": b"{}",
        "model.safetensors": b"w",
    }
    link = tarfile.TarInfo("weights")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    for body, limit, code in (
        (tar_of(file("a", b"x" * 50)), 10, "too_large"),
        (tar_of((link, b"")), 100, "invalid_request"),
        (tar_of(file("sub/a", b"x")), 100, "invalid_request"),
        (b"no tar", 100, "invalid_request"),
        (tar_of(file("a", b"x"), file("a", b"y")), 100, "invalid_request"),
    ):  # a name twice
        with pytest.raises(RegistryError) as refused:
            folder_files(body, limit)
        assert refused.value.code == code


def sparse_tar(name: str, size: int) -> bytes:
    """A tar of one sparse file of ``size`` bytes in 10 KB: PAX format 1.0, as ``tar --sparse
    --format=pax`` writes it (a map of one 1-byte piece at its end, the holes read as zeros)."""
    import io
    import tarfile

    sparse_map = f"1\n{size - 1}\n1\n".encode().ljust(512, b"\0")
    info = tarfile.TarInfo(name)
    info.size = len(sparse_map) + 1
    info.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(size),
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(sparse_map + b"x"))
    return buffer.getvalue()


def tar_of_files(files: dict[str, bytes]) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_model_upload_expands_to_no_more_than_it_sends_and_holds_a_bounded_number_of_files(server):
    """A 10 KB tar declaring a 20 MB sparse file, and a folder of 300 tiny files, are refused
    (422) before any file is read; a model that would not load as served is refused naming its
    file and field; nothing is published."""
    from tests.support.registry_files import exported_model

    tokenizer = BPETokenizer.train(sentences(200), vocab_size=300)
    client = RegistryClient(server, token=TOKEN)
    client.create("tars", tokenizer.to_json())
    sparse = sparse_tar("model.safetensors", 20_000_000)
    assert len(sparse) <= 10_240
    folder = exported_model(tokenizer, {"lineage": "tars", "version": 1})
    many = {**folder, **{f"shard-{i:05d}.json": b"{}" for i in range(300)}}
    nan = {**folder, "config.json": folder["config.json"].replace(b'"n_positions": 64', b'"n_positions": NaN')}
    assert nan != folder
    for body, code, reason in (
        (sparse, "invalid_request", "the folder's tar holds 'model.safetensors' as a sparse"),
        (
            tar_of_files(many),
            "invalid_model",
            f"the folder has {len(many)} files; a model folder holds at most 256 (TOKMAINT_REGISTRY_MAX_MODEL_FILES)",
        ),
        (tar_of_files(nan), "invalid_model", "config.json: not JSON: NaN is not a JSON number"),
    ):
        answer = httpx.post(
            f"{server}/v1/tokenizers/tars/models",
            content=body,
            params={"version": "1"},
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-tar"},
        )
        assert answer.status_code == 422 and answer.json()["error_code"] == code, answer.text
        assert any(r.startswith(reason) for r in answer.json()["reasons"]), answer.json()
    assert client.models("tars").count == 0
    published = httpx.post(
        f"{server}/v1/tokenizers/tars/models",
        content=tar_of_files(folder),
        params={"version": "1"},
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-tar"},
    )
    assert published.status_code == 201 and client.models("tars").count == 1
