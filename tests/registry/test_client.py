"""registry/client.py: the registry's client library."""

import httpx
import pytest

from registry.client import RegistryClient, RegistryRefused


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
