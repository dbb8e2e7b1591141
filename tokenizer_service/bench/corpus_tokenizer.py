"""What the benchmarks that train a tokenizer on the oldest text of a corpus share: how much of
it they read, and the tokenizer's vocabulary (``bench throughput``, ``bench registry``)."""

from __future__ import annotations

from tokenizer_service.settings import Number, Settings, setting, whole
from tokenizer_service.tokenizer_json import MAX_ID_SPACE


class CorpusTokenizerSettings(Settings):
    """The oldest ``max_mb`` megabytes of a corpus and the ``vocab_size`` of a tokenizer trained on
    them (each benchmark's own prefix names its variables, and it adds its own settings).

    >>> from tokenizer_service.bench.throughput import ThroughputSettings
    >>> ThroughputSettings(max_mb=2).max_mb, ThroughputSettings().vocab_size
    (2.0, 50257)
    """

    max_mb: float = setting(20.0, Number(float, low=0, low_open=True), "megabytes of the corpus to read (its oldest)")
    vocab_size: int = setting(50257, whole(257, MAX_ID_SPACE), "vocabulary of the tokenizer trained on that text")
