"""Ted-Tok's EMA statistics (τ_token, τ_buffer, τ_pair) behind a small store interface.

Lazy decay: a store keeps raw sums S and one global scale g_t = (1-α)^t, with τ = g_t·S.
A step multiplies g by (1-α) and adds α·c/g to the keys it saw, so it costs O(keys seen), not
O(table). When g gets small every S is rescaled once (τ unchanged) before anything underflows.

>>> import numpy as np
>>> s = MemoryStatsStore(alpha=0.5)
>>> s.apply_counts(KeyCounts(np.array([1]), np.array([4.0]), np.array([7]), np.array([2.0])))
>>> s.apply_counts(KeyCounts(np.array([1]), np.array([0.0]), np.array([], np.int64), np.array([])))
>>> s.token(np.array([1])).tolist(), s.pair(np.array([7])).tolist(), s.step
([1.0], [0.5], 2)

Every backend (memory here, Redis in ``pipeline``) passes ``tests/tokenizer_service/test_stats_store.py``.
"""

from __future__ import annotations

import abc
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from tokenizer_service.counting import (
    BoolArray,
    Float64Array,
    Int64Array,
    KeyCounts,
    StepCounts,
    add_counts,
    pack_pair,
    unpack_pair,
)

# Rescale when the decay factor falls below this; float64 keeps ~300 decades of headroom.
RENORMALISE_BELOW = 1e-100


@dataclass(frozen=True)
class StatsEdit:
    """The statistics part of one revision, applied atomically (deletes first, then adds).

    ``deletes``: (w, u, v) ids, applied in order (a token's children before it) — hand τ_buffer[w]
    to u and v, set τ_pair[u,v] = τ_token[w], then forget w and every pair that contains it (its
    id may be reused by an add below).
    ``adds``: (w, u, v) ids — τ_token[w] = τ_pair[u,v], τ_buffer[w] = 0, and (u, v) leaves the pair
    table: the pair is now a token, so it must not be proposed again.
    """

    deletes: list[tuple[int, int, int]] = field(default_factory=list)
    adds: list[tuple[int, int, int]] = field(default_factory=list)


class StatsStore(abc.ABC):
    """Interface of a Ted-Tok statistics store. Keys are token ids and packed pair keys."""

    alpha: float

    @property
    @abc.abstractmethod
    def step(self) -> int:
        """Number of time steps applied so far."""

    @abc.abstractmethod
    def apply_counts(self, counts: KeyCounts) -> None:
        """Advance one time step: τ ← (1-α)τ + α·c for token, buffer and pair statistics."""

    @abc.abstractmethod
    def token(self, ids: Int64Array) -> Float64Array:
        """τ_token of the given ids (0 for unknown)."""

    @abc.abstractmethod
    def buffer(self, ids: Int64Array) -> Float64Array:
        """τ_buffer of the given ids (0 for unknown)."""

    @abc.abstractmethod
    def pair(self, keys: Int64Array) -> Float64Array:
        """τ_pair of the given packed pair keys (0 for unknown)."""

    @property
    @abc.abstractmethod
    def tracked_pairs(self) -> int:
        """Number of pairs in the pair table."""

    @abc.abstractmethod
    def top_pairs(self, n: int) -> tuple[Int64Array, Float64Array]:
        """The n pairs with the largest τ_pair, as (keys, values), largest first."""

    @abc.abstractmethod
    def apply_edit(self, edit: StatsEdit) -> None:
        """Apply a revision's statistics changes atomically."""


def combine_steps(steps: list[StepCounts], *, alpha: float) -> StepCounts:
    """Consecutive steps' counts as one lazy-decay update: with decay (1-α) a step, step j of
    the list (from 0) adds α·c/g_j where g_j = g_0·(1-α)^j, so the steps together add
    (α/g_0)·Σ_j (1-α)^-j·c_j — what this returns as counts, for a store to apply as the first
    step's weight times these (``RedisStatsStore.apply_step(span=len(steps))``): each key is
    then touched once for all the steps. Equal to applying them one by one up to rounding.

    >>> one = StepCounts(np.array([1]), np.array([2.0]), np.array([], np.int64), np.array([]), 0, 0)
    >>> combine_steps([one, one], alpha=0.5).token_counts.tolist()
    [6.0]
    """
    return add_counts(steps, (1.0 - alpha) ** -np.arange(len(steps), dtype=np.float64))


class SparseVector:
    """Float64 values at sorted int64 keys, updated in vectorised batches.

    >>> v = SparseVector()
    >>> v.add(np.array([5, 2]), np.array([1.0, 2.0])); v.add(np.array([5]), np.array([3.0]))
    >>> v.get(np.array([2, 5, 9])).tolist()
    [2.0, 4.0, 0.0]
    """

    def __init__(self) -> None:
        self.keys = np.zeros(0, np.int64)
        self.values = np.zeros(0, np.float64)

    def __len__(self) -> int:
        return len(self.keys)

    def _locate(self, keys: Int64Array) -> tuple[NDArray[np.intp], BoolArray]:
        idx = np.searchsorted(self.keys, keys)
        found = idx < len(self.keys)
        found[found] = self.keys[idx[found]] == keys[found]
        return idx, found

    def get(self, keys: Int64Array) -> Float64Array:
        keys = np.asarray(keys, np.int64)
        idx, found = self._locate(keys)
        out = np.zeros(len(keys))
        out[found] = self.values[idx[found]]
        return out

    def add(self, keys: Int64Array, values: Float64Array) -> None:
        """values[k] += v; ``keys`` must be distinct."""
        keys = np.asarray(keys, np.int64)
        values = np.asarray(values, np.float64)
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
        idx, found = self._locate(keys)
        self.values[idx[found]] += values[found]
        new = ~found
        if new.any():
            self.keys = np.insert(self.keys, idx[new], keys[new])
            self.values = np.insert(self.values, idx[new], values[new])

    def set(self, keys: Int64Array, values: Float64Array) -> None:
        """values[k] = v; ``keys`` must be distinct."""
        keys = np.asarray(keys, np.int64)
        self.add(keys, np.zeros(len(keys)))
        idx, _ = self._locate(keys)
        self.values[idx] = values

    def drop(self, mask: BoolArray) -> None:
        keep = ~mask
        self.keys, self.values = self.keys[keep], self.values[keep]

    def remove(self, keys: Int64Array) -> None:
        """Drop the entries at ``keys`` (absent keys are ignored). The few keys are looked up in
        the sorted table: ``np.isin`` over a 1M-key table sorted it again (~0.1-0.2 s an edit).

        >>> v = SparseVector()
        >>> v.add(np.array([2, 5, 9]), np.array([1.0, 2.0, 3.0])); v.remove(np.array([9, 4, 2]))
        >>> v.keys.tolist(), v.values.tolist()
        ([5], [2.0])
        """
        idx, found = self._locate(np.asarray(keys, np.int64))
        mask = np.zeros(len(self.keys), bool)
        mask[idx[found]] = True
        self.drop(mask)


class MemoryStatsStore(StatsStore):
    """In-process store: dense arrays for per-token statistics, a sparse vector for pairs."""

    def __init__(self, *, alpha: float) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.alpha = alpha
        self._step = 0
        self.scale = 1.0  # g_t: τ = scale · S
        self._token = np.zeros(0)
        self._buffer = np.zeros(0)
        self._pairs = SparseVector()

    @property
    def step(self) -> int:
        return self._step

    def _grow(self, max_id: int) -> None:
        if max_id >= len(self._token):
            size = max(max_id + 1, 2 * len(self._token))
            self._token = np.concatenate([self._token, np.zeros(size - len(self._token))])
            self._buffer = np.concatenate([self._buffer, np.zeros(size - len(self._buffer))])

    def _raw(self, array: Float64Array, ids: Int64Array) -> Float64Array:
        ids = np.asarray(ids, np.int64)
        out = np.zeros(len(ids))
        inside = ids < len(array)
        out[inside] = array[ids[inside]]
        return out

    def apply_counts(self, counts: KeyCounts) -> None:
        self.apply_span(counts)

    def apply_span(self, counts: KeyCounts, *, span: int = 1) -> None:
        """Advance ``span`` steps with their counts combined by :func:`combine_steps` (span 1:
        one step's counts): the first step's weight α/g times the combined counts. When the
        scale would fall below ``RENORMALISE_BELOW`` within the steps, every S is rescaled
        before them (τ is the same).

        >>> s = MemoryStatsStore(alpha=0.5)
        >>> s.apply_span(KeyCounts(np.array([1]), np.array([6.0]), np.zeros(0, np.int64), np.zeros(0)), span=2)
        >>> s.token(np.array([1])).tolist(), s.step
        ([1.5], 2)
        """
        keep = 1.0 - self.alpha
        last = self.scale
        for _ in range(span):
            last *= keep
        if last < RENORMALISE_BELOW:
            self._token *= self.scale
            self._buffer *= self.scale
            self._pairs.values *= self.scale
            self.scale = 1.0
        weight = self.alpha / (self.scale * keep)
        for _ in range(span):
            self.scale *= keep
        self._step += span
        token_ids = np.asarray(counts.token_ids, np.int64)
        if len(token_ids):
            self._grow(int(token_ids.max()))
            np.add.at(self._token, token_ids, weight * np.asarray(counts.token_counts, np.float64))
            np.add.at(self._buffer, token_ids, weight * np.asarray(counts.token_counts, np.float64))
        if len(counts.pair_keys):
            self._pairs.add(counts.pair_keys, weight * np.asarray(counts.pair_counts, np.float64))

    def token(self, ids: Int64Array) -> Float64Array:
        return self.scale * self._raw(self._token, ids)

    def buffer(self, ids: Int64Array) -> Float64Array:
        return self.scale * self._raw(self._buffer, ids)

    def pair(self, keys: Int64Array) -> Float64Array:
        return self.scale * self._pairs.get(keys)

    @property
    def tracked_pairs(self) -> int:
        return len(self._pairs)

    def top_pairs(self, n: int) -> tuple[Int64Array, Float64Array]:
        values = self._pairs.values
        n = min(n, len(values))
        if n == 0:
            return np.zeros(0, np.int64), np.zeros(0)
        top = np.argpartition(-values, n - 1)[:n]
        # Largest first; equal values in key order so revisions are reproducible.
        top = top[np.lexsort((self._pairs.keys[top], -values[top]))]
        return self._pairs.keys[top], self.scale * values[top]

    def apply_edit(self, edit: StatsEdit) -> None:
        ids = [i for triple in edit.deletes + edit.adds for i in triple]
        if ids:
            self._grow(max(ids))
        forgotten = [w for w, _, _ in edit.deletes]
        for w, u, v in edit.deletes:
            credit = self._buffer[w]
            for parent in (u, v) if u != v else (u,):
                share = credit if u != v else 2 * credit
                self._token[parent] += share
                self._buffer[parent] += share
        if forgotten:
            # Credits above went delete by delete, children before parents (the edit's order), so
            # a chain of deletes hands its buffers down; no freed pair is read by a later delete,
            # so setting them all at once, and then dropping the forgotten ids' pairs, equals
            # doing it delete by delete.
            freed_pairs = np.array([pack_pair(u, v) for _, u, v in edit.deletes], np.int64)
            self._pairs.set(freed_pairs, self._token[forgotten])
            self.forget(forgotten)
        if edit.adds:
            new_ids = np.array([w for w, _, _ in edit.adds], np.int64)
            keys = np.array([pack_pair(u, v) for _, u, v in edit.adds], np.int64)
            self._token[new_ids] = self._pairs.get(keys)
            self._buffer[new_ids] = 0.0
            self._pairs.remove(keys)

    def forget(self, ids: Sequence[int]) -> None:
        """Drop the statistics of ``ids``: their own and every pair that holds one (ids another
        version gave to other tokens: nothing stale stays on them).

        >>> s = MemoryStatsStore(alpha=0.5)
        >>> s.apply_counts(KeyCounts(np.array([1, 2]), np.array([2.0, 2.0]),
        ...                          np.array([pack_pair(1, 2), pack_pair(2, 2)]), np.array([2.0, 2.0])))
        >>> s.forget([1]); s.token(np.array([1, 2])).tolist(), s.tracked_pairs
        ([0.0, 1.0], 1)
        """
        id_array = np.asarray(ids, np.int64)
        if not len(id_array):
            return
        self._grow(int(id_array.max()))
        self._token[id_array] = self._buffer[id_array] = 0.0
        # A table of the forgotten ids looked up by both ids of every pair: np.isin made twice
        # as many passes over the 1M pairs of bench throughput's revision (~40 ms against ~20).
        first, second = unpack_pair(self._pairs.keys)
        forgotten = np.zeros(
            1 + max(int(id_array.max()), int(first.max(initial=0)), int(second.max(initial=0))), np.bool_
        )
        forgotten[id_array] = True
        self._pairs.drop(forgotten[first] | forgotten[second])

    def prune(self, max_pairs: int) -> None:
        """Keep the strongest ``max_pairs`` pairs (ties in key order, as ``top_pairs`` ranks them).

        >>> s = MemoryStatsStore(alpha=0.5)
        >>> s.apply_counts(KeyCounts(np.zeros(0, np.int64), np.zeros(0), np.array([3, 4, 5]),
        ...                          np.array([1.0, 2.0, 1.0])))
        >>> s.prune(2); s.top_pairs(3)[0].tolist()
        [4, 3]
        """
        values = self._pairs.values
        if len(values) <= max_pairs:
            return
        keep = np.zeros(len(values), bool)
        keep[np.lexsort((self._pairs.keys, -values))[:max_pairs]] = True
        self._pairs.drop(~keep)

    def copy(self) -> "MemoryStatsStore":
        """An independent copy (what an edit may change while the original stays as it was)."""
        other = MemoryStatsStore(alpha=self.alpha)
        other.scale, other._step = self.scale, self._step
        other._token, other._buffer = self._token.copy(), self._buffer.copy()
        other._pairs.keys, other._pairs.values = self._pairs.keys.copy(), self._pairs.values.copy()
        return other

    _HEADER = struct.Struct("<dqqq")  # scale, step, length of the per-id arrays, pairs

    def to_bytes(self) -> bytes:
        """The statistics as bytes (the raw sums as they are: bit for bit).

        >>> s = MemoryStatsStore(alpha=0.5)
        >>> s.apply_counts(KeyCounts(np.array([1]), np.array([4.0]), np.array([7]), np.array([2.0])))
        >>> t = MemoryStatsStore.from_bytes(s.to_bytes(), alpha=0.5)
        >>> t.token(np.array([1])).tolist(), t.top_pairs(1)[0].tolist(), t.step
        ([2.0], [7], 1)
        """
        return b"".join(
            [
                self._HEADER.pack(self.scale, self._step, len(self._token), len(self._pairs)),
                self._token.astype("<f8").tobytes(),
                self._buffer.astype("<f8").tobytes(),
                self._pairs.keys.astype("<i8").tobytes(),
                self._pairs.values.astype("<f8").tobytes(),
            ]
        )

    @classmethod
    def from_bytes(cls, blob: bytes, *, alpha: float) -> "MemoryStatsStore":
        """The store :meth:`to_bytes` made, with decay ``alpha``."""
        store = cls(alpha=alpha)
        store.scale, store._step, ids, pairs = cls._HEADER.unpack_from(blob)
        at = cls._HEADER.size
        store._token = np.frombuffer(blob, "<f8", ids, at).astype(np.float64)
        store._buffer = np.frombuffer(blob, "<f8", ids, at + 8 * ids).astype(np.float64)
        store._pairs.keys = np.frombuffer(blob, "<i8", pairs, at + 16 * ids).astype(np.int64)
        store._pairs.values = np.frombuffer(blob, "<f8", pairs, at + 16 * ids + 8 * pairs).astype(np.float64)
        return store
