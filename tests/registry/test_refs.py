"""registry/refs.py: version references (numbers, aliases) as the API reads them."""

import json

import httpx
import pytest

from registry.client import RegistryClient
from tests.support.registry_server import TOKEN
from tests.support.registry_server import post as _post


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
