"""The registry's HTTP API through a real uvicorn server (``tokmaint registry serve`` on a free
loopback port), with the client library the trainer and the pipeline will use."""

import json
import multiprocessing
import os
import secrets
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from registry.api.routes.hub import model_commit
from registry.artifacts import LocalArtifactStore
from registry.client import RegistryClient, RegistryRefused
from registry.local_server import free_port, start_server
from tests.conftest import sentences, tedtok_lineage
from tests.support.registry_files import (
    collect_until_stopped,
    exported_model,
    lying_diff,
    model_variant,
    moved_ids,
    unreachable_add,
)
from tokenizer_service.bpe import BPETokenizer

TOKEN = secrets.token_hex(16)


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


def _post(server, path, body: bytes, token: str | None = TOKEN):
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    return httpx.post(f"{server}{path}", content=body, headers=headers, timeout=60)


def test_refusals_answer_with_every_reason_and_store_nothing(server, revisions):
    initial, made = revisions
    client = RegistryClient(server, token=TOKEN)
    client.create("refusals", initial.to_json())
    revision = made[0]
    tokenizer = revision.tokenizer.to_json()
    cases = [
        ("truncated JSON", "/v1/tokenizers/refusals/versions", b'{"tokenizer": "{', 422, "not JSON"),
        (
            "a truncated tokenizer.json",
            "/v1/tokenizers/refusals/versions",
            json.dumps({"tokenizer": tokenizer[:1000]}).encode(),
            422,
            "not JSON",
        ),
        (
            "the tokenizer as an object",
            "/v1/tokenizers/refusals/versions",
            json.dumps({"tokenizer": json.loads(tokenizer)}).encode(),
            422,
            "'tokenizer' must be a string",
        ),
        (
            "not BPE",
            "/v1/tokenizers/refusals/versions",
            json.dumps({"tokenizer": json.dumps({"model": {"type": "Unigram", "vocab": {}, "merges": []}})}).encode(),
            422,
            "tokmaint maintains BPE tokenizers only",
        ),
        (
            "a diff that lies",
            "/v1/tokenizers/refusals/versions",
            json.dumps(
                {"tokenizer": tokenizer, "diff": json.loads(lying_diff(revision.diff.to_json().encode()))}
            ).encode(),
            409,
            "the diff does not match the tokenizers",
        ),
        (
            "moved ids",
            "/v1/tokenizers/refusals/versions",
            json.dumps({"tokenizer": moved_ids(revision.tokenizer).decode()}).encode(),
            409,
            "surviving tokens changed their id",
        ),
        (
            "unreachable add",
            "/v1/tokenizers/refusals/versions",
            json.dumps({"tokenizer": unreachable_add(revision.tokenizer).decode()}).encode(),
            422,
            "added tokens are unreachable",
        ),
        (
            "over the size limit",
            "/v1/tokenizers/refusals/versions",
            json.dumps({"tokenizer": tokenizer, "pad": "x" * 2_000_000}).encode(),
            413,
            "the limit is 1,048,576",
        ),
        (
            "a name with ../",
            "/v1/tokenizers",
            json.dumps({"name": "../etc", "tokenizer": tokenizer}).encode(),
            422,
            "lineage name must be",
        ),
        (
            "an unknown lineage",
            "/v1/tokenizers/nope/versions",
            json.dumps({"tokenizer": tokenizer}).encode(),
            404,
            "no lineage 'nope'",
        ),
        (
            "a tokenizer key nested 500 deep",
            "/v1/tokenizers/refusals/versions",
            json.dumps({"tokenizer": tokenizer[:-1] + ',"extra":' + "[" * 500 + "]" * 500 + "}"}).encode(),
            422,
            "nested more than 64 levels deep",
        ),
        (
            "a diff nested 500 deep",
            "/v1/tokenizers/refusals/versions",
            json.dumps({"tokenizer": tokenizer, "diff": {"config": json.loads("[" * 500 + "]" * 500)}}).encode(),
            422,
            "nested more than 64 levels deep",
        ),
    ]
    # "²" passes str.isdigit but is not a version number (schemathesis found the 500 it once gave);
    # digits of any kind are refused as an alias's name, so it is read as a version, and none is.
    superscript = httpx.get(f"{server}/v1/tokenizers/refusals/versions/²/tokenizer.json")
    assert superscript.status_code == 404 and superscript.json()["error_code"] == "version_not_found"
    for case, path, body, status, reason in cases:
        response = _post(server, path, body)
        assert response.status_code == status, (case, response.text)
        answer = response.json()
        assert any(reason in r for r in answer["reasons"]), (case, answer)
        assert set(answer) == {"error_code", "message", "reasons"}
    unauthorised = _post(
        server, "/v1/tokenizers/refusals/versions", json.dumps({"tokenizer": tokenizer}).encode(), token="wrong"
    )
    assert unauthorised.status_code == 401 and unauthorised.headers["www-authenticate"] == "Bearer"
    assert unauthorised.json()["error_code"] == "unauthorized"  # one error shape, FastAPI's own refusals too
    negative = httpx.get(f"{server}/v1/tokenizers/refusals/versions?offset=-1")
    assert negative.status_code == 422 and negative.json()["error_code"] == "invalid_request"
    assert any("offset" in r for r in negative.json()["reasons"])
    assert httpx.get(f"{server}/v1/no-such-path").json()["error_code"] == "not_found"
    assert _post(server, "/v1/tokenizers/refusals/rollback", b'{"to": 1}', token=None).status_code == 401
    assert client.versions("refusals").count == 1
    assert [lineage.name for lineage in client.lineages()].count("refusals") == 1


@pytest.mark.parametrize(
    "path",
    [
        "/v1/tokenizers/{name}/versions/{n}",
        "/v1/tokenizers/{name}/versions/{n}/tokenizer.json",
        "/v1/tokenizers/{name}/versions/{n}/diff",
        "/v1/tokenizers/{name}/versions?offset={n}",
        "/v1/tokenizers/{name}/versions?limit={n}",
        "/v1/tokenizers/{name}/diff?from={n}",
        "/v1/tokenizers/{name}/diff?from=1&to={n}",
        "/lineages/{name}/versions/{n}",
        "rollback",
        "alias",
    ],
)
def test_version_numbers_past_what_sql_holds_answer_4xx(server, revisions, path):
    """2^63 and beyond name no version: SQLite raised OverflowError, a 500, on every such path."""
    client = RegistryClient(server, token=TOKEN)
    if "huge" not in [lineage.name for lineage in client.lineages()]:
        client.create("huge", revisions[0].to_json())
    for n in (1 << 63, 1 << 64, 10**30):
        if path == "rollback":
            response = _post(server, "/v1/tokenizers/huge/rollback", json.dumps({"to": n}).encode())
        elif path == "alias":
            response = httpx.put(
                f"{server}/v1/tokenizers/huge/aliases/prod",
                json={"version": n},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
        else:
            response = httpx.get(server + path.format(name="huge", n=n))
        assert response.status_code < 500, (path, n, response.text)
        if "offset" in path or "limit" in path:
            assert response.status_code == 200
        else:
            assert response.status_code in (404, 422), (path, n, response.text)


def test_alias_names_the_hub_reads_as_another_revision_are_refused(server, revisions):
    """``main``, ``v2``, ``v0``, ``12`` and a commit hash are revisions to the Hub: an alias of
    that name would resolve one way over REST and another over the Hub (or be cached as
    immutable though it moves). Refused with 422 and why; other names, ``v2-candidate`` among
    them, are aliases."""
    client = RegistryClient(server, token=TOKEN)
    if "shadows" not in [lineage.name for lineage in client.lineages()]:
        client.create("shadows", revisions[0].to_json())
    why = {
        "main": "'main' names the newest version",
        "v2": "a number, or v and a number, names a version",
        "v0": "a number, or v and a number, names a version",
        "12": "a number, or v and a number, names a version",
        "0123456789abcdef0123456789abcdef01234567": "40 hex characters name a commit (the Hub's)",
    }
    for alias, reason in why.items():
        response = httpx.put(
            f"{server}/v1/tokenizers/shadows/aliases/{alias}",
            json={"version": 1},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert response.status_code == 422, (alias, response.text)
        answer = response.json()
        assert answer["error_code"] == "invalid_name"
        assert answer["reasons"] == [f"alias {alias!r} would shadow a version reference: {reason}"]
    for alias in ("serving", "v2-candidate", "mainline"):
        assert client.set_alias("shadows", alias, 1).version == 1
        assert client.version("shadows", alias).number == 1
    hub = httpx.head(f"{server}/shadows/resolve/v2-candidate/tokenizer.json")
    assert hub.status_code == 200 and hub.headers["cache-control"] == "no-cache"  # an alias moves


def test_gc_beside_the_server_never_takes_a_model_s_files_from_the_hub(revisions, tmp_path):
    """A collector with no age limit (``registry gc --older-than-minutes 0``, over and over in a
    process of its own) beside a server taking model uploads whose files the store holds
    already, unnamed: every model the server committed serves every file over the Hub (the
    collector deleted some between its reading of the names and the commit, and the Hub
    answered 500, ``KeyError: no artifact``)."""
    initial, _ = revisions
    root = tmp_path / "registry"
    process, url = start_server(root, env={"TOKMAINT_REGISTRY_TOKEN": TOKEN})
    context = multiprocessing.get_context("spawn")
    started, stop, runs = context.Event(), context.Event(), context.Value("i", 0)
    collector = context.Process(
        target=collect_until_stopped,
        args=(f"sqlite:///{root / 'registry.db'}", str(root / "artifacts"), started, stop, runs),
    )
    try:
        RegistryClient(url, token=TOKEN).create("raced", initial.to_json())
        exported = exported_model(initial, {"lineage": "raced", "version": 1})
        store = LocalArtifactStore(root / "artifacts")
        folders = []
        for k in range(48):
            folder = tmp_path / f"model-{k}"
            folder.mkdir()
            for name, data in model_variant(exported, k).items():
                (folder / name).write_bytes(data)
                store.put(data)  # stored already, named by nothing
            folders.append(folder)
        collector.start()
        assert started.wait(120)

        def upload(folder):
            with RegistryClient(url, token=TOKEN) as client:
                return client.publish_model("raced", folder, version=1)

        with ThreadPoolExecutor(4) as threads:
            published = list(threads.map(upload, folders))
    finally:
        stop.set()
        collector.join(60)
    try:
        assert collector.exitcode == 0 and runs.value > 1
        for model, folder in zip(published, folders):
            commit = model_commit(model)
            for name in exported:
                response = httpx.get(f"{url}/raced-models/resolve/{commit}/{name}")
                assert response.status_code == 200, (model.number, name, response.text)
                assert response.content == (folder / name).read_bytes()
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_local_server_logs_to_a_file_and_a_failed_start_shows_it(tmp_path):
    """``start_server`` sends the server's output to ``server.log`` (never a pipe nobody reads)."""
    from tokenizer_service.errors import TokmaintError

    with pytest.raises(TokmaintError) as failed:
        start_server(
            tmp_path / "bad", env={"TOKMAINT_REGISTRY_TOKEN": TOKEN, "TOKMAINT_REGISTRY_MAX_UPLOAD_MB": "lots"}
        )
    assert "server.log" in str(failed.value) and "MAX_UPLOAD_MB" in str(failed.value).upper()
    assert (tmp_path / "bad" / "server.log").stat().st_size > 0


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


def test_evolve_publishes_every_version_and_continues(server, drifting_corpus, tmp_path, capsys):
    from tokmaint.cli import main

    os.environ["TOKMAINT_REGISTRY_TOKEN"] = TOKEN
    try:
        argv = [
            "evolve",
            "--corpus",
            str(drifting_corpus),
            "--out",
            str(tmp_path / "out"),
            "--registry",
            server,
            "--lineage",
            "stream",
            "--vocab-size",
            "300",
            "--step-docs",
            "10",
            "--horizon-docs",
            "30",
            "--interval-docs",
            "50",
            "--warmup-docs",
            "0",
            "--batch-size",
            "10",
            "--init-share",
            "0.3",
            "--json",
        ]
        assert main(argv) == 0
        versions = json.loads(capsys.readouterr().out)["versions"]
        client = RegistryClient(server)
        assert client.version("stream").number == versions > 1
        for n in range(1, versions + 1):
            assert client.download("stream", n) == (tmp_path / "out" / f"v{n:04d}" / "tokenizer.json").read_bytes()
        assert (
            client.diff("stream", 2).to_dict()["entries"]
            == json.loads((tmp_path / "out" / "v0002" / "diff.json").read_text())["entries"]
        )
        assert main(argv) == 0  # the same run again: nothing new
        assert client.version("stream").number == versions
        # Only a registry, and a lineage another run started: refused in one line.
        assert main([*argv[:2], argv[2], "--registry", server, "--lineage", "stream", "--vocab-size", "280"]) == 2
        assert "registry lineage 'stream' version 1 is not this run's" in capsys.readouterr().err
    finally:
        os.environ.pop("TOKMAINT_REGISTRY_TOKEN", None)


def test_bench_registry_measures_a_real_server(drifting_corpus, capsys):
    from tokmaint.cli import main

    assert (
        main(
            [
                "bench",
                "registry",
                "--corpus",
                str(drifting_corpus),
                "--vocab-size",
                "300",
                "--batch-size",
                "5",
                "--publishes",
                "3",
                "--clients",
                "2",
                "--seconds",
                "0.3",
                "--repeats",
                "1",
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert 0 < result["publish_ms"]["p50"] <= result["publish_ms"]["p99"]
    assert result["get_rps"] > 0 and result["get_304_rps"] > 0
    assert result["publishes"] == 3 and result["changed_ids_per_publish"] == 5
    assert 0 < result["tokenizer_mb"] < 1
    hub = result["hub_download_ms"]
    assert result["hub_resolve_rps"] > 0 and hub["tokens"] == 300
    assert min(hub["cold"], hub["warm"], hub["disk"]) > 0 and hub["warm_vs_disk"] == hub["warm"] / hub["disk"]


def test_no_request_built_from_the_openapi_schema_gets_a_500(server):
    """Schemathesis generates requests for every operation from the server's own OpenAPI schema,
    authorised, so writes reach validation too: none may answer with a server error."""
    schema = schemathesis.openapi.from_url(f"{server}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 14
    served = _requests_served(server)

    for operation in operations:

        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy())
        def no_server_error(case):
            case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=[not_a_server_error])

        no_server_error()
    assert _requests_served(server) - served >= 5 * len(operations)  # the requests did reach the server


def _requests_served(server: str) -> float:
    lines = httpx.get(f"{server}/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("tokmaint_registry_requests_total{"))


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


def test_if_none_match_is_a_list_of_entity_tags(server):
    """A tokenizer.json download answers 304 when one of the ``If-None-Match`` entity tags is its
    own (weak or strong) or it is ``*``, and only then, before the file is in memory and after
    (the middleware that serves it then answers alike)."""
    client = RegistryClient(server, token=TOKEN)
    client.create("etags", BPETokenizer.train(sentences(200), vocab_size=290).to_json())
    url = f"{server}/v1/tokenizers/etags/versions/1/tokenizer.json"
    for served in ("from the store", "from memory"):
        sha = httpx.get(url).headers["etag"].strip('"')
        for asked, status in (
            ("*", 304),
            (f'"{sha}"', 304),
            (f'W/"{sha}"', 304),
            (f'"a", "{sha}"', 304),
            (f'"x{sha}"', 200),
            (f'"{sha}", x', 200),
            (sha, 200),
            ('"other"', 200),
        ):
            assert httpx.get(url, headers={"If-None-Match": asked}).status_code == status, (served, asked)


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


def test_an_answer_that_is_not_the_api_s_is_refused_naming_what_is_wrong():
    """Another server on the registry's port answers: a refusal as the registry's are, not a
    half-read version."""
    client = RegistryClient("http://registry.test")
    client.http = httpx.Client(
        base_url="http://registry.test",
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json={"number": "one"})),
    )
    with pytest.raises(RegistryRefused) as refused:
        client.version("news")
    assert refused.value.code == "invalid_answer" and refused.value.reasons[:3] == [
        "http://registry.test/v1/tokenizers/news/versions/latest answered no VersionPublic",
        "lineage: Field required",
        "number: Input should be a valid integer, unable to parse string as an integer",
    ]
