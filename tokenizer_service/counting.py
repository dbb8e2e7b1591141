"""Per-step counts: token occurrences and within-word adjacent pairs, vectorised with numpy.

Only pairs inside one pre-token (word) are counted: BPE never merges across a word boundary,
so a cross-boundary pair could never become a token. Each distinct word of a step is encoded
once (and cached for the tokenizer version) and weighted by its frequency.

>>> from tokenizer_service.bpe import BPETokenizer
>>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={
...     "pre_tokenizer": {"type": "WhitespaceSplit"}})
>>> c = StepCounter(tok).count_texts(["ab ab ba", "aab"])
>>> dict(zip(c.token_ids.tolist(), c.token_counts.tolist()))
{0: 2.0, 1: 1.0, 2: 3.0}
>>> [(unpack_pair(k), n) for k, n in zip(c.pair_keys.tolist(), c.pair_counts.tolist())]
[((0, 2), 1.0), ((1, 0), 1.0)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tokenizer_service.bpe import BPETokenizer

PAIR_SHIFT = 32


def pack_pair(u: int | np.ndarray, v: int | np.ndarray) -> int | np.ndarray:
    """One int64 key for the ordered pair (u, v).

    >>> unpack_pair(pack_pair(3, 7))
    (3, 7)
    """
    return (np.int64(u) << PAIR_SHIFT) | np.int64(v) if np.isscalar(u) else (u.astype(np.int64) << PAIR_SHIFT) | v


def unpack_pair(key: int) -> tuple[int, int]:
    return int(key) >> PAIR_SHIFT, int(key) & ((1 << PAIR_SHIFT) - 1)


@dataclass(frozen=True)
class StepCounts:
    """One time step's counts: distinct keys (sorted) with their weights, plus sizes."""

    token_ids: np.ndarray
    token_counts: np.ndarray
    pair_keys: np.ndarray
    pair_counts: np.ndarray
    n_bytes: int
    n_tokens: int

    @property
    def bytes_per_token(self) -> float:
        return self.n_bytes / max(self.n_tokens, 1)


class WordVocabulary:
    """Stable integer ids for distinct words (pre-tokens), shared across tokenizer versions.

    >>> w = WordVocabulary()
    >>> w.ids(["x", "y", "x"]).tolist(), w.words[1]
    ([0, 1, 0], 'y')
    """

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.words: list[str] = []

    def ids(self, words: Iterable[str]) -> np.ndarray:
        index, out = self.index, []
        for w in words:
            i = index.get(w)
            if i is None:
                i = index[w] = len(self.words)
                self.words.append(w)
            out.append(i)
        return np.asarray(out, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.words)


class StepCounter:
    """Counts tokens and within-word pairs for one tokenizer version, caching word encodings.

    The cache is ragged: ``_flat`` holds every encoded word's token ids back to back and
    ``_start``/``_len`` locate word ``i``; a step gathers them in one numpy pass.
    """

    def __init__(self, tokenizer: BPETokenizer, words: WordVocabulary | None = None) -> None:
        self.words = words if words is not None else WordVocabulary()
        self.tokenizer = tokenizer
        self._flat = np.zeros(0, dtype=np.int64)
        self._start = np.zeros(0, dtype=np.int64)
        self._len = np.full(0, -1, dtype=np.int64)
        self._word_bytes = np.zeros(0, dtype=np.int64)

    def set_tokenizer(self, tokenizer: BPETokenizer) -> None:
        """Switch to a new version: word encodings are recomputed lazily, word ids are kept."""
        self.tokenizer = tokenizer
        self._len[:] = -1

    def _ensure_encoded(self, word_ids: np.ndarray) -> None:
        n = len(self.words)
        if len(self._len) < n:
            grow = n - len(self._len)
            self._start = np.concatenate([self._start, np.zeros(grow, np.int64)])
            self._len = np.concatenate([self._len, np.full(grow, -1, np.int64)])
            new_bytes = [len(self.tokenizer.token_bytes(w)) for w in self.words.words[n - grow :]]
            self._word_bytes = np.concatenate([self._word_bytes, np.asarray(new_bytes, np.int64)])
        missing = np.unique(word_ids[self._len[word_ids] < 0])
        if len(missing) == 0:
            return
        encoded = [self.tokenizer.tokenize_word(self.words.words[i]) for i in missing.tolist()]
        lengths = np.fromiter((len(e) for e in encoded), np.int64, len(encoded))
        if len(self._flat) > 8 * max(int(self._len[self._len > 0].sum()), 1 << 16):
            self._compact()
        self._start[missing] = len(self._flat) + np.concatenate([[0], np.cumsum(lengths)[:-1]])
        self._len[missing] = lengths
        self._flat = np.concatenate([self._flat, np.fromiter((t for e in encoded for t in e), np.int64)])

    def _compact(self) -> None:
        """Drop encodings of earlier versions that are no longer referenced."""
        live = np.flatnonzero(self._len >= 0)
        self._flat = self._gather(live, self._len[live])
        self._start[live] = np.concatenate([[0], np.cumsum(self._len[live])[:-1]])

    def _gather(self, word_ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Concatenate the cached encodings of ``word_ids`` (ragged gather, no Python loop)."""
        total = int(lengths.sum())
        offsets = np.repeat(self._start[word_ids] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        return self._flat[offsets + np.arange(total)]

    def count_texts(self, texts: Sequence[str]) -> StepCounts:
        """Pre-tokenize texts, count each distinct word once, weight by its frequency."""
        freq = self.tokenizer.word_counts(texts)
        word_ids = self.words.ids(freq.keys())
        return self.count_words(word_ids, np.fromiter(freq.values(), np.float64, len(freq)))

    def count_words(self, word_ids: np.ndarray, freqs: np.ndarray) -> StepCounts:
        """Counts for a multiset of known words given as (distinct ids, frequencies)."""
        word_ids = np.asarray(word_ids, np.int64)
        freqs = np.asarray(freqs, np.float64)
        self._ensure_encoded(word_ids)
        lengths = self._len[word_ids]
        tokens = self._gather(word_ids, lengths)
        weights = np.repeat(freqs, lengths)
        token_ids, inverse = np.unique(tokens, return_inverse=True)
        token_counts = np.bincount(inverse, weights=weights, minlength=len(token_ids))
        # A pair starts at every position but a word's last one.
        not_last = np.ones(len(tokens), dtype=bool)
        not_last[np.cumsum(lengths)[lengths > 0] - 1] = False
        starts = np.flatnonzero(not_last)
        keys = pack_pair(tokens[starts], tokens[starts + 1])
        pair_keys, pinv = np.unique(keys, return_inverse=True)
        pair_counts = np.bincount(pinv, weights=weights[starts], minlength=len(pair_keys))
        return StepCounts(
            token_ids=token_ids,
            token_counts=token_counts,
            pair_keys=pair_keys,
            pair_counts=pair_counts,
            n_bytes=int((self._word_bytes[word_ids] * freqs).sum()),
            n_tokens=int(weights.sum()),
        )
