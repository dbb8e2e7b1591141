"""registry/api/errors.py: every refusal answers one error shape, with every reason."""

import json

import httpx

from registry.client import RegistryClient
from tests.support.registry_files import (
    lying_diff,
    moved_ids,
    unreachable_add,
)
from tests.support.registry_server import TOKEN
from tests.support.registry_server import post as _post


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
