"""Shared fixtures: small tokenizers trained on text the tests generate."""

from __future__ import annotations

import random

import pytest

from tokenizer_service.bpe import BPETokenizer

WORDS = ["stream", "token", "merge", "drift", "commit", "revise", "vocab", "tensor", "model", "data",
         "kafka", "redis", "beam", "train", "byte", "pair", "sink", "graph", "epoch", "batch"]


def sentences(n: int, *, seed: int = 0, words: list[str] = WORDS) -> list[str]:
    """Deterministic pseudo-English sentences over a small word list."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + rng.choice([".", "!", "?", ""])
            for _ in range(n)]


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return sentences(400)


@pytest.fixture(scope="session")
def byte_tokenizer(corpus) -> BPETokenizer:
    return BPETokenizer.train(corpus, vocab_size=320)
