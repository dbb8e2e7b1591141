"""The tokenizer_service tests' shared fixtures."""

import json

import pytest

from tokenizer_service.bpe import BPETokenizer


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A small valid byte-level tokenizer.json as a dict."""
    return json.loads(BPETokenizer.train(["low lower lowest newer wider"] * 4, vocab_size=280).to_json())
