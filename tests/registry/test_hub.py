"""The registry speaks the Hugging Face Hub protocol: the real clients (transformers,
huggingface_hub), in a process of their own with only ``HF_ENDPOINT`` at a registry server on a
free loopback port, read a lineage's versions by number, alias and commit hash; their cache sees
a new version as new; unknown repositories, revisions and files raise their own errors."""

import hashlib
import json
import subprocess
import sys
import textwrap

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from registry.api.routes.hub import commit_hash
from registry.client import RegistryClient
from tests.conftest import REGISTRY_TOKEN, real_tokenizer_path, sentences
from tokenizer_service.bpe import BPETokenizer

RESOLVE = "/{repo}/resolve/{revision}/{filename:path}"


def hub_client(registry: str, home, script: str) -> dict:
    """Run ``script`` (its last line prints one JSON value) with the Hub clients and nothing of
    tokmaint's: ``HF_ENDPOINT`` is the registry, ``HF_HOME`` a cache of the test's own."""
    env = {
        "HF_ENDPOINT": registry,
        "HF_HOME": str(home),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PATH": "/usr/bin:/bin",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def resolve_gets(registry: str) -> float:
    """How many GETs of a resolve URL the registry has answered (its /metrics)."""
    families = text_string_to_metric_families(httpx.get(f"{registry}/metrics").text)
    return sum(
        s.value
        for f in families
        for s in f.samples
        if s.name == "tokmaint_registry_requests_total" and s.labels["route"] == RESOLVE and s.labels["method"] == "GET"
    )


@pytest.fixture(scope="module")
def lineage(registry_server):
    """A lineage with <|endoftext|>, two versions and the alias ``stable`` on version 2."""
    url = registry_server[0]
    texts = sentences(300)
    client = RegistryClient(url, token=REGISTRY_TOKEN)
    client.create("hub", BPETokenizer.train(texts, vocab_size=330, special_tokens=["<|endoftext|>"]).to_json())
    client.publish(
        "hub", BPETokenizer.train(texts, vocab_size=345, special_tokens=["<|endoftext|>"]).to_json(), kind="import"
    )
    client.set_alias("hub", "stable", 2)
    return url, client


def test_auto_tokenizer_loads_a_version_by_number_alias_and_commit(lineage, tmp_path):
    url, client = lineage
    v2 = client.version("hub", 2)
    commit = commit_hash("hub", 2, v2.sha256)
    texts = sentences(20, seed=4) + ["héllo <|endoftext|> wörld", "  two  spaces\n\nand 12345"]
    loaded = hub_client(
        url,
        tmp_path,
        f"""
        import json
        from transformers import AutoTokenizer
        out = {{}}
        for revision in ("2", "v2", "stable", "{commit}", "v1", "main"):
            tok = AutoTokenizer.from_pretrained("hub", revision=revision)
            out[revision] = {{"ids": [tok(t, add_special_tokens=False).input_ids for t in {texts!r}],
                              "size": len(tok), "bos": tok.bos_token, "text": tok.decode(tok("a b").input_ids)}}
        print(json.dumps(out))
    """,
    )
    for revision, number in (("2", 2), ("v2", 2), ("stable", 2), (commit, 2), ("v1", 1), ("main", 2)):
        tokenizer = client.tokenizer("hub", number)
        assert loaded[revision]["ids"] == [tokenizer.encode(t) for t in texts], revision
        assert loaded[revision]["size"] == len(tokenizer) and loaded[revision]["bos"] == "<|endoftext|>"
        assert loaded[revision]["text"] == "a b"
    assert loaded["v1"]["ids"] != loaded["v2"]["ids"]


def test_downloads_are_cached_by_commit_and_a_new_version_is_seen(lineage, tmp_path):
    """A second download of an unchanged version asks only HEAD (the same ETag) and reads the
    cache; one by commit hash asks nothing; after a new version, ``latest`` resolves to it."""
    url, client = lineage
    script = """
        import json, os
        from huggingface_hub import HfApi, hf_hub_download, snapshot_download
        folder = snapshot_download("hub", revision="latest")
        info = HfApi().model_info("hub", revision="latest")
        path = hf_hub_download("hub", "tokenizer.json", revision="v2")
        print(json.dumps({"folder": folder, "files": sorted(os.listdir(folder)), "sha": info.sha,
                          "card": info.card_data.to_dict(), "path": path,
                          "etag": os.path.basename(os.path.realpath(path))}))
    """
    first = hub_client(url, tmp_path, script)
    latest = client.version("hub")
    assert first["sha"] == commit_hash("hub", latest.number, latest.sha256)
    assert first["folder"].endswith(f"/snapshots/{first['sha']}")
    assert first["files"] == [
        "revision_diff.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert first["card"]["tokmaint"]["number"] == latest.number and first["etag"] == latest.sha256
    with open(first["path"], "rb") as f:
        assert f.read() == client.download("hub", 2)

    gets = resolve_gets(url)
    again = hub_client(url, tmp_path, script)
    assert again == first and resolve_gets(url) == gets  # HEADs only: every file came from the cache
    by_commit = hub_client(
        url,
        tmp_path,
        f"""
        from huggingface_hub import hf_hub_download
        print('"' + hf_hub_download("hub", "tokenizer_config.json", revision="{first["sha"]}") + '"')
    """,
    )
    assert by_commit.startswith(first["folder"]) and resolve_gets(url) == gets

    published = client.rollback("hub", 1)  # a new version, with version 1's tokenizer
    moved = hub_client(url, tmp_path, script)
    assert moved["sha"] == commit_hash("hub", published.number, published.sha256) != first["sha"]
    assert moved["card"]["tokmaint"]["number"] == published.number and resolve_gets(url) > gets
    with open(moved["folder"] + "/tokenizer.json", "rb") as f:
        assert f.read() == client.download("hub", published.number)

    alias = """
        from huggingface_hub import hf_hub_download
        print('"' + hf_hub_download("hub", "tokenizer.json", revision="stable") + '"')
    """
    before = hub_client(url, tmp_path, alias)
    client.set_alias("hub", "stable", 1)  # an alias that moved is seen as moved
    after = hub_client(url, tmp_path, alias)
    v1, v2 = client.version("hub", 1), client.version("hub", 2)
    assert f"/snapshots/{commit_hash('hub', 2, v2.sha256)}/" in before
    assert f"/snapshots/{commit_hash('hub', 1, v1.sha256)}/" in after
    client.set_alias("hub", "stable", 2)


def test_unknown_repositories_revisions_and_files_raise_the_clients_own_errors(lineage, tmp_path):
    url, _ = lineage
    raised = hub_client(
        url,
        tmp_path,
        """
        import json
        from huggingface_hub import hf_hub_download, HfApi
        from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
        from transformers import AutoTokenizer
        out = []
        for call in (lambda: hf_hub_download("nothing", "tokenizer.json"),
                     lambda: hf_hub_download("team/hub", "tokenizer.json"),
                     lambda: hf_hub_download("hub", "tokenizer.json", revision="v999"),
                     lambda: hf_hub_download("hub", "tokenizer.json", revision="no-such-alias"),
                     lambda: hf_hub_download("hub", "tokenizer.json", revision="0" * 40),
                     lambda: hf_hub_download("hub", "vocab.txt", revision="v1"),
                     lambda: HfApi().model_info("nothing")):
            try:
                call()
                out.append(None)
            except Exception as exc:
                out.append(next((kind.__name__ for kind in (EntryNotFoundError, RevisionNotFoundError,
                                                            RepositoryNotFoundError) if isinstance(exc, kind)),
                                repr(exc)))
        try:
            AutoTokenizer.from_pretrained("nothing")
        except OSError as exc:
            out.append("OSError: " + str(exc).splitlines()[0])
        print(json.dumps(out))
    """,
    )
    assert raised[:7] == [
        "RepositoryNotFoundError",
        "RepositoryNotFoundError",
        "RevisionNotFoundError",
        "RevisionNotFoundError",
        "RevisionNotFoundError",
        "EntryNotFoundError",
        "RepositoryNotFoundError",
    ]
    assert "nothing" in raised[7]


def test_revalidation_is_a_304_and_numbered_files_are_immutable(lineage):
    url, client = lineage
    v1 = client.version("hub", 1)
    head = httpx.head(f"{url}/hub/resolve/v1/tokenizer.json")
    assert head.status_code == 200 and head.headers["etag"] == f'"{v1.sha256}"'
    assert int(head.headers["content-length"]) == len(client.download("hub", 1)) and not head.content
    assert head.headers["x-repo-commit"] == commit_hash("hub", 1, v1.sha256)
    assert "immutable" in head.headers["cache-control"]
    assert httpx.head(f"{url}/hub/resolve/main/tokenizer.json").headers["cache-control"] == "no-cache"
    again = httpx.get(f"{url}/hub/resolve/v1/tokenizer.json", headers={"If-None-Match": head.headers["etag"]})
    assert again.status_code == 304 and not again.content
    config = httpx.get(f"{url}/hub/resolve/1/tokenizer_config.json").json()
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and config["eos_token"] == "<|endoftext|>"
    tree = httpx.get(f"{url}/api/models/hub/tree/v1").json()
    assert {f["path"]: f["size"] for f in tree}["tokenizer.json"] == int(head.headers["content-length"])
    assert (
        httpx.get(f"{url}/api/models/hub/tree/v1/additional_chat_templates").headers["x-error-code"] == "EntryNotFound"
    )
    huge = httpx.head(f"{url}/hub/resolve/{'9' * 5000}/tokenizer.json")  # past any version: no number at all
    assert huge.status_code == 404 and huge.headers["x-error-code"] == "RevisionNotFound"


def test_a_published_model_loads_with_from_pretrained_and_gives_the_same_logits(lineage, tmp_path, monkeypatch, capsys):
    """A model folder (tokmaint trainer export's) published beside version 2 with `registry
    publish-model` loads as ``hub-models`` with AutoModelForCausalLM and AutoTokenizer, by the
    version's number and as ``main``, and gives the model's own logits; folders that do not fit
    the version are refused with every reason."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from tests.support.models import tiny_model

    from tokmaint.cli import main
    from trainer.export import write_model_folder

    url, client = lineage
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", REGISTRY_TOKEN)
    tokenizer = client.tokenizer("hub", 2)
    model = tiny_model(tokenizer.id_space).eval()
    write_model_folder(model, tokenizer, {"lineage": "hub", "version": 2}, tmp_path / "model")
    assert (
        main(["registry", "publish-model", "hub", "--model", str(tmp_path / "model"), "--registry", url, "--json"]) == 0
    )
    published = json.loads(capsys.readouterr().out)
    assert (published["version"], published["hub_repo"]) == (2, "hub-models") and "model.safetensors" in published[
        "files"
    ]
    ids = tokenizer.encode("the cat sat on the mat")
    loaded = hub_client(
        url,
        tmp_path / "hf",
        f"""
        import json, torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        out = {{}}
        for revision in ("v2", "main"):
            model = AutoModelForCausalLM.from_pretrained("hub-models", revision=revision)
            tok = AutoTokenizer.from_pretrained("hub-models", revision=revision)
            with torch.no_grad():
                logits = model(torch.tensor([{ids!r}])).logits[0]
            out[revision] = {{"logits": logits.tolist(), "ids": tok("the cat sat on the mat").input_ids,
                              "max_length": tok.model_max_length}}
        print(json.dumps(out))
    """,
    )
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0]
    for revision in ("v2", "main"):
        assert torch.allclose(torch.tensor(loaded[revision]["logits"]), expected, atol=1e-5)
        assert loaded[revision]["ids"] == ids and loaded[revision]["max_length"] == 64

    other = client.tokenizer("hub", 1)
    write_model_folder(
        GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=10)),
        other,
        {"lineage": "hub", "version": 2},
        tmp_path / "wrong",
    )
    assert main(["registry", "publish-model", "hub", "--model", str(tmp_path / "wrong"), "--registry", url]) != 0
    refused = capsys.readouterr().err
    assert "invalid_model" in refused and "10 rows" in refused and "not version 2's" in refused
    assert client.models("hub").count == 1
    # A newer model of version 2 may come: its number is no fixed revision in a models repository.
    assert httpx.head(f"{url}/hub-models/resolve/v2/config.json").headers["cache-control"] == "no-cache"
    missing = httpx.head(f"{url}/hub-models/resolve/v1/config.json")  # no model was trained with version 1
    assert missing.status_code == 404 and missing.headers["x-error-code"] == "RevisionNotFound"
    assert httpx.head(f"{url}/nothing-models/resolve/main/config.json").headers["x-error-code"] == "RepoNotFound"


@pytest.mark.parametrize("family", ["qwen3", "llama3", "llama2"])
def test_real_tokenizers_load_over_the_hub_and_encode_as_their_file(registry_server, family, tmp_path):
    """Production tokenizers of several families (byte-level with added tokens outside the
    vocabulary, SentencePiece with byte fallback) published as a lineage load with AutoTokenizer
    and encode as the file itself does (the tokenizers library), special tokens included."""
    from tokenizers import Tokenizer

    url = registry_server[0]
    path = real_tokenizer_path(family)
    client = RegistryClient(url, token=REGISTRY_TOKEN)
    name = f"real-{family.replace('_', '-')}"
    client.create(name, path.read_bytes(), kind="import")
    texts = ["Hello world, ünïcödé and 12345 — tabs\tand\nnewlines", "def f(x):\n    return x ** 2  # 😀"]
    loaded = hub_client(
        url,
        tmp_path,
        f"""
        import json
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained("{name}", revision="main")
        print(json.dumps({{"ids": [tok(t, add_special_tokens=False).input_ids for t in {texts!r}],
                           "bos": tok.bos_token, "size": len(tok)}}))
    """,
    )
    reference = Tokenizer.from_file(str(path))
    assert loaded["ids"] == [reference.encode(t, add_special_tokens=False).ids for t in texts]
    assert loaded["size"] == reference.get_vocab_size(with_added_tokens=True)
    config = httpx.get(f"{url}/{name}/resolve/main/tokenizer_config.json").json()
    assert loaded["bos"] == config.get("bos_token")


def test_a_commit_no_version_has_reads_only_the_versions_not_scanned_yet(tmp_path):
    """A commit hash names its version by the commits of every version, each lineage's read
    once: an unknown one costs one read of the newer versions (none), not a scan of them all."""
    from registry.api.routes.hub import HubFiles, HubNotFound
    from registry.artifacts import LocalArtifactStore
    from registry.db import make_engine, migrate
    from registry.store import Registry

    class Reads(Registry):  # the real store, its pages of versions written down
        offsets: list[int] = []

        def versions(self, name, *, offset=0, limit=100):
            self.offsets.append(offset)
            return super().versions(name, offset=offset, limit=limit)

    url = f"sqlite:///{tmp_path / 'registry.db'}"
    migrate(url)
    registry = Reads(make_engine(url), LocalArtifactStore(tmp_path / "artifacts"))
    texts = sentences(200)
    registry.create_lineage("l", BPETokenizer.train(texts, vocab_size=300).to_json().encode())
    infos = [
        registry.publish("l", BPETokenizer.train(texts, vocab_size=300 + 5 * k).to_json().encode(), kind="import")
        for k in (1, 2)
    ]
    hub = HubFiles()
    assert hub.revision(registry, "l", commit_hash("l", 2, infos[0].sha256)).number == 2
    for unknown in ("f" * 40, "e" * 40):
        with pytest.raises(HubNotFound) as found:
            hub.revision(registry, "l", unknown)
        assert found.value.code == "RevisionNotFound"
    newest = registry.publish("l", BPETokenizer.train(texts, vocab_size=320).to_json().encode(), kind="import")
    assert hub.revision(registry, "l", commit_hash("l", 4, newest.sha256)).number == 4
    assert hub.revision(registry, "l", commit_hash("l", 3, infos[1].sha256)).number == 3  # known: no read
    assert Reads.offsets == [0, 3, 3, 3]


def test_files_over_the_cache_s_share_are_streamed_whole(tmp_path, monkeypatch, capsys):
    """A registry keeping 16 KB of files in memory: a published model's weights (and any file
    over 1 KB) come streamed from the store, byte for byte, with their length and ETag."""
    import hashlib

    from tests.support.models import tiny_model

    from registry.local_server import start_server
    from tokmaint.cli import main
    from trainer.export import write_model_folder

    process, url = start_server(
        tmp_path / "registry",
        env={"TOKMAINT_REGISTRY_TOKEN": REGISTRY_TOKEN, "TOKMAINT_REGISTRY_CACHE_MB": str(16 / 1024)},
    )
    try:
        client = RegistryClient(url, token=REGISTRY_TOKEN)
        tokenizer = BPETokenizer.train(sentences(300), vocab_size=330, special_tokens=["<|endoftext|>"])
        client.create("big", tokenizer.to_json())
        model = tiny_model(tokenizer.id_space)
        write_model_folder(model, tokenizer, {"lineage": "big", "version": 1}, tmp_path / "model")
        monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", REGISTRY_TOKEN)
        assert main(["registry", "publish-model", "big", "--model", str(tmp_path / "model"), "--registry", url]) == 0
        capsys.readouterr()
        for repo, name, media in (
            ("big-models", "model.safetensors", "application/octet-stream"),
            ("big", "tokenizer.json", "application/json"),
        ):
            expected = (
                (tmp_path / "model" / name).read_bytes()
                if repo == "big-models"
                else client.tokenizer("big", 1).to_json().encode()
            )
            answer = httpx.get(f"{url}/{repo}/resolve/main/{name}")
            assert answer.status_code == 200 and answer.headers["content-type"] == media
            assert httpx.head(f"{url}/{repo}/resolve/main/{name}").headers["content-type"] == media
            assert len(expected) > 1024 and answer.content == expected
            assert answer.headers["content-length"] == str(len(expected))
            assert answer.headers["etag"] == f'"{hashlib.sha256(expected).hexdigest()}"'
        small = httpx.get(f"{url}/big/resolve/main/special_tokens_map.json")  # made here, in memory
        assert small.headers["content-type"] == "application/json" and small.json()
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def model_v1(lineage, tmp_path_factory):
    """A model trained with version 1 (``tokmaint trainer export``'s folder), published beside it."""

    from tests.support.models import tiny_model

    from trainer.export import write_model_folder

    url, client = lineage
    tokenizer = client.tokenizer("hub", 1)
    model = tiny_model(tokenizer.id_space, seed=1, n_positions=32).eval()
    folder = tmp_path_factory.mktemp("model-v1") / "model"
    write_model_folder(model, tokenizer, {"lineage": "hub", "version": 1}, folder)
    return folder, client.publish_model("hub", folder, version=1)


def test_head_and_get_agree_on_the_content_type_and_if_none_match_is_a_list_of_entity_tags(lineage, model_v1):
    """Weights are bytes and JSON files JSON, on HEAD as on GET, small or streamed; an
    ``If-None-Match`` answers 304 when one of its entity tags is the file's (weak or strong) or
    it is ``*``, and only then: a tag that merely holds the sha256 is another tag."""
    url, client = lineage
    _, published = model_v1
    commit = httpx.head(f"{url}/hub-models/resolve/v1/config.json").headers["x-repo-commit"]
    for repo, revision, name, media in (
        ("hub-models", commit, "model.safetensors", "application/octet-stream"),
        ("hub-models", commit, "config.json", "application/json"),
        ("hub-models", commit, "special_tokens_map.json", "application/json"),
        ("hub", "v1", "tokenizer.json", "application/json"),
        ("hub", "v1", "tokenizer_config.json", "application/json"),
    ):
        resolve = f"{url}/{repo}/resolve/{revision}/{name}"
        head, get = httpx.head(resolve), httpx.get(resolve)
        assert head.status_code == get.status_code == 200, name
        assert head.headers["content-type"] == get.headers["content-type"] == media, name
        sha = get.headers["etag"].strip('"')
        for asked, status in (
            ("*", 304),
            (f'"{sha}"', 304),
            (f'W/"{sha}"', 304),
            (f'"other", W/"{sha}"', 304),
            (f'"x{sha}"', 200),
            (f'"{sha}x"', 200),
            (sha, 200),
            (f'"{sha[:-1]}"', 200),
        ):
            for method in (httpx.head, httpx.get):
                answer = method(resolve, headers={"If-None-Match": asked})
                assert answer.status_code == status, (name, asked, method)
    assert published.files["model.safetensors"]["sha256"] == httpx.head(
        f"{url}/hub-models/resolve/{commit}/model.safetensors"
    ).headers["etag"].strip('"')


def test_a_snapshot_download_folder_publishes_the_files_its_links_point_to(
    lineage, model_v1, tmp_path, monkeypatch, capsys
):
    """``snapshot_download`` gives a folder of links into the Hub clients' cache: ``publish-model``
    of it uploads the files they point to, and the model is published again, file for file."""
    from tokmaint.cli import main

    url, client = lineage
    folder, published = model_v1
    commit = httpx.head(f"{url}/hub-models/resolve/v1/config.json").headers["x-repo-commit"]
    snapshot = hub_client(
        url,
        tmp_path / "hf",
        f"""
        import json
        from huggingface_hub import snapshot_download
        print(json.dumps(snapshot_download("hub-models", revision="{commit}")))
    """,
    )
    from pathlib import Path

    from tokenizer_service.output_dir import MARKER

    links = sorted(Path(snapshot).iterdir())
    assert links and all(path.is_symlink() for path in links)
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", REGISTRY_TOKEN)
    assert main(["registry", "publish-model", "hub", "--model", snapshot, "--registry", url, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["version"] == 1 and again["number"] > published.number
    assert (
        again["files"]
        == published.files
        == {
            path.name: {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "size": path.stat().st_size}
            for path in folder.iterdir()
            if path.name != MARKER
        }
    )


def test_a_models_repository_reads_each_model_once(tmp_path):
    """A models repository's revisions read the lineage's models once: a request after that
    reads none but those published since (a model's files are never read again per request),
    and a known commit reads nothing."""
    from registry.api.routes.hub import HubFiles
    from registry.artifacts import LocalArtifactStore
    from registry.db import make_engine, migrate
    from registry.store import Registry
    from tests.support.registry_files import exported_model

    class Reads(Registry):  # the real store, the models each read returns written down
        rows: list[int] = []

        def models(self, name, **options):
            found = super().models(name, **options)
            self.rows.append(len(found))
            return found

    url = f"sqlite:///{tmp_path / 'registry.db'}"
    migrate(url)
    registry = Reads(make_engine(url), LocalArtifactStore(tmp_path / "artifacts"))
    tokenizer = BPETokenizer.train(sentences(200), vocab_size=300)
    registry.create_lineage("l", tokenizer.to_json().encode())
    folder = exported_model(tokenizer, {"lineage": "l", "version": 1})
    registry.publish_model("l", {**folder, **{f"extra-{i:03d}.json": b"{}" for i in range(200)}}, version=1)
    hub = HubFiles()
    first = hub.revision(registry, "l-models", "main")
    for revision in ("main", "v1", "1", first.commit, "main"):
        assert hub.revision(registry, "l-models", revision) is first
    assert Reads.rows == [1, 0, 0, 0, 0]  # the commit asked nothing
    newer = registry.publish_model("l", folder, version=1)
    assert hub.revision(registry, "l-models", "main").number == newer.number == 2
    assert hub.revision(registry, "l-models", first.commit) is first
    assert Reads.rows == [1, 0, 0, 0, 0, 1]
