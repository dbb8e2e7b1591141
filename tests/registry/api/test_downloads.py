"""registry/api/downloads.py: tokenizer.json downloads, their ETags and revalidation."""

import httpx

from registry.client import RegistryClient
from tests.conftest import sentences
from tests.support.registry_server import TOKEN
from tokenizer_service.bpe import BPETokenizer


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
