"""The registry API's models: every answer of a real server reads into its model and back to the
same JSON, key for key and in order (what the client returns and the CLI prints), and a body
refused names every field that is wrong, in the one error shape."""

import uuid

import httpx
import pytest
from pydantic import ValidationError

from registry.api.routes.tokenizers import json_request
from registry.client import RegistryClient
from schemas.registry_api import (
    AliasPublic,
    AliasSet,
    LineageCreate,
    LineagesPublic,
    ModelsPublic,
    RollbackCreate,
    VersionCreate,
    VersionPublic,
    VersionsPublic,
    body_problems,
)
from schemas.revision import RevisionDiff
from tests.conftest import REGISTRY_TOKEN, sentences
from tests.support.registry_files import exported_model, variant
from tokenizer_service.bpe import BPETokenizer

WRITER = {"Authorization": f"Bearer {REGISTRY_TOKEN}"}


@pytest.fixture(scope="module")
def lineage(registry_server, tmp_path_factory):
    """A lineage of two versions (metrics on both), an alias and a model; its URL and name."""
    url, _ = registry_server
    name = f"api-{uuid.uuid4().hex[:8]}"
    base = BPETokenizer.train(sentences(100), vocab_size=300)
    folder = tmp_path_factory.mktemp("model")
    for file, data in exported_model(base, {"lineage": name, "version": 1}).items():
        (folder / file).write_bytes(data)
    with RegistryClient(url, token=REGISTRY_TOKEN) as client:
        client.create(name, base.to_json(), metrics={"bytes_per_token": 3.25})
        client.publish(name, variant(base, 1), kind="import", metrics={"bytes_per_token": 3.5, "rollback_to": 1})
        client.set_alias(name, "serving", 2)
        client.publish_model(name, folder, version=1)
    return url, name


def _round_trip(model, answer: httpx.Response) -> None:
    """The answer read as ``model`` gives back its JSON, keys in the same order."""
    assert answer.status_code in (200, 201), answer.text
    sent = answer.json()
    read = model.model_validate_json(answer.content).model_dump(mode="json")
    assert read == sent and list(read) == list(sent)


def test_every_answer_reads_into_its_model_and_back(lineage):
    url, name = lineage
    base = f"{url}/v1/tokenizers/{name}"
    _round_trip(LineagesPublic, httpx.get(f"{url}/v1/tokenizers"))
    _round_trip(VersionsPublic, httpx.get(f"{base}/versions"))
    _round_trip(VersionPublic, httpx.get(f"{base}/versions/2"))
    _round_trip(VersionPublic, httpx.get(f"{base}/versions/serving"))
    _round_trip(VersionPublic, httpx.get(f"{base}/watch", params={"after": 0}))
    _round_trip(ModelsPublic, httpx.get(f"{base}/models"))
    _round_trip(AliasPublic, httpx.put(f"{base}/aliases/serving", json={"version": "latest"}, headers=WRITER))
    _round_trip(VersionPublic, httpx.post(f"{base}/rollback", json={"to": 1}, headers=WRITER))
    version = VersionPublic.model_validate_json(httpx.get(f"{base}/versions/2").content)
    assert (version.number, version.parent, version.kind, version.metrics["bytes_per_token"]) == (2, 1, "import", 3.5)
    assert version.created_at.tzinfo is not None and version.diff_url == f"/v1/tokenizers/{name}/versions/2/diff"


def test_a_served_diff_reads_as_a_revision_diff_and_back(lineage):
    """What the client's ``diff`` and ``composed_diff`` return: the served JSON, entries last."""
    url, name = lineage
    for answer in (
        httpx.get(f"{url}/v1/tokenizers/{name}/versions/2/diff"),
        httpx.get(f"{url}/v1/tokenizers/{name}/diff", params={"from": 1, "to": 2}),
    ):
        sent = answer.json()
        data = RevisionDiff.from_dict(sent).to_dict()
        data["entries"] = data.pop("entries")
        assert data == sent and list(data) == list(sent) and sent["entries"]


@pytest.mark.parametrize(
    "path, body, reasons",
    [
        (
            "versions",
            {"tokenizer": {"model": {}}, "diff": [], "kind": "bpe", "parent": "1", "metrics": [1]},
            [
                "'tokenizer' must be a string, got an object",
                "'diff' must be an object or null, got a list",
                "'kind' must be 'tedtok', 'litetoken' or 'import', got 'bpe'",
                "'parent' must be an integer or null, got a string",
                "'metrics' must be an object, got a list",
            ],
        ),
        (
            "versions",
            {"parent": True},
            ["'tokenizer' must be a string, got nothing", "'parent' must be an integer or null, got a boolean"],
        ),
        ("versions", {"tokenizer": None}, ["'tokenizer' must be a string, got null"]),
        ("aliases/serving", {"version": True}, ["'version' must be an integer or a string, got a boolean"]),
        ("rollback", {"to": 1.0}, ["'to' must be an integer, got a number"]),
    ],
)
def test_a_refused_body_names_every_field_that_is_wrong(lineage, path, body, reasons):
    url, name = lineage
    method = "PUT" if path.startswith("aliases") else "POST"
    answer = httpx.request(method, f"{url}/v1/tokenizers/{name}/{path}", json=body, headers=WRITER)
    assert answer.status_code == 422
    assert answer.json() == {
        "error_code": "invalid_request",
        "message": "invalid_request: " + "; ".join(reasons),
        "reasons": reasons,
    }


def test_a_new_lineage_s_body_is_refused_the_same_way(registry_server):
    url, _ = registry_server
    answer = httpx.post(f"{url}/v1/tokenizers", json={"name": 7, "kind": "tedtok"}, headers=WRITER)
    assert answer.status_code == 422 and answer.json()["reasons"] == [
        "'name' must be a string, got a number",
        "'tokenizer' must be a string, got nothing",
        "'kind' must be 'initial' or 'import', got 'tedtok'",
    ]


def test_a_null_is_a_field_s_default_and_json_types_are_strict():
    assert VersionCreate.model_validate({"tokenizer": "{}", "kind": None, "metrics": None, "parent": None}) == (
        VersionCreate(tokenizer="{}")
    )
    assert LineageCreate.model_validate({"name": "n", "tokenizer": "{}", "x": 1}).kind == "initial"  # others ignored
    for body, model in (({"to": "3"}, RollbackCreate), ({"to": True}, RollbackCreate), ({"version": 1.5}, AliasSet)):
        with pytest.raises(ValidationError) as refused:
            model.model_validate(body)
        assert len(body_problems(model, refused.value)) == 1


def test_the_openapi_request_bodies_are_the_models_schemas(registry_server):
    operations = httpx.get(f"{registry_server[0]}/openapi.json").json()["paths"]
    for path, method, model in (
        ("/v1/tokenizers", "post", LineageCreate),
        ("/v1/tokenizers/{name}/versions", "post", VersionCreate),
        ("/v1/tokenizers/{name}/aliases/{alias}", "put", AliasSet),
        ("/v1/tokenizers/{name}/rollback", "post", RollbackCreate),
    ):
        served = operations[path][method]["requestBody"]["content"]["application/json"]["schema"]
        declared = json_request(model)["requestBody"]["content"]["application/json"]["schema"]
        assert served["title"] == model.__name__ and served["required"] == declared["required"]
        assert served["properties"].keys() == declared["properties"].keys()
