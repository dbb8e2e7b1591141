"""Ted-Tok's EMA statistics (τ_token, τ_buffer, τ_pair) behind a small store interface.

Lazy decay: a store keeps raw sums S and one global scale g_t = (1-α)^t, with τ = g_t·S.
A step multiplies g by (1-α) and adds α·c/g to the keys it saw, so it costs O(keys seen), not
O(table). When g gets small every S is rescaled once (τ unchanged) before anything underflows.

>>> import numpy as np
>>> s = MemoryStatsStore(alpha=0.5)
>>> s.apply_counts(token_ids=np.array([1]), token_counts=np.array([4.0]),
...                pair_keys=np.array([7]), pair_counts=np.array([2.0]))
>>> s.apply_counts(token_ids=np.array([1]), token_counts=np.array([0.0]),
...                pair_keys=np.array([], np.int64), pair_counts=np.array([]))
>>> s.token(np.array([1])).tolist(), s.pair(np.array([7])).tolist(), s.step
([1.0], [0.5], 2)

Every backend (memory here, Redis in ``pipeline``) passes ``tests/test_stats_store.py``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import numpy as np

from tokenizer_service.counting import PAIR_SHIFT, StepCounts, add_counts, pack_pair

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
    def apply_counts(
        self, *, token_ids: np.ndarray, token_counts: np.ndarray, pair_keys: np.ndarray, pair_counts: np.ndarray
    ) -> None:
        """Advance one time step: τ ← (1-α)τ + α·c for token, buffer and pair statistics."""

    @abc.abstractmethod
    def token(self, ids: np.ndarray) -> np.ndarray:
        """τ_token of the given ids (0 for unknown)."""

    @abc.abstractmethod
    def buffer(self, ids: np.ndarray) -> np.ndarray:
        """τ_buffer of the given ids (0 for unknown)."""

    @abc.abstractmethod
    def pair(self, keys: np.ndarray) -> np.ndarray:
        """τ_pair of the given packed pair keys (0 for unknown)."""

    @property
    @abc.abstractmethod
    def tracked_pairs(self) -> int:
        """Number of pairs in the pair table."""

    @abc.abstractmethod
    def top_pairs(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The n pairs with the largest τ_pair, as (keys, values), largest first."""

    @abc.abstractmethod
    def apply_edit(self, edit: StatsEdit) -> None:
        """Apply a revision's statistics changes atomically."""

    def apply_step_counts(self, counts: StepCounts) -> None:
        """Advance one time step with a counter's output."""
        self.apply_counts(
            token_ids=counts.token_ids,
            token_counts=counts.token_counts,
            pair_keys=counts.pair_keys,
            pair_counts=counts.pair_counts,
        )


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

    def _locate(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.searchsorted(self.keys, keys)
        found = idx < len(self.keys)
        found[found] = self.keys[idx[found]] == keys[found]
        return idx, found

    def get(self, keys: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, np.int64)
        idx, found = self._locate(keys)
        out = np.zeros(len(keys))
        out[found] = self.values[idx[found]]
        return out

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
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

    def set(self, keys: np.ndarray, values: np.ndarray) -> None:
        """values[k] = v; ``keys`` must be distinct."""
        keys = np.asarray(keys, np.int64)
        self.add(keys, np.zeros(len(keys)))
        idx, _ = self._locate(keys)
        self.values[idx] = values

    def drop(self, mask: np.ndarray) -> None:
        keep = ~mask
        self.keys, self.values = self.keys[keep], self.values[keep]


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

    def _raw(self, array: np.ndarray, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        out = np.zeros(len(ids))
        inside = ids < len(array)
        out[inside] = array[ids[inside]]
        return out

    def apply_counts(self, *, token_ids, token_counts, pair_keys, pair_counts) -> None:
        self._step += 1
        self.scale *= 1.0 - self.alpha
        if self.scale < RENORMALISE_BELOW:
            self._token *= self.scale
            self._buffer *= self.scale
            self._pairs.values *= self.scale
            self.scale = 1.0
        weight = self.alpha / self.scale
        token_ids = np.asarray(token_ids, np.int64)
        if len(token_ids):
            self._grow(int(token_ids.max()))
            np.add.at(self._token, token_ids, weight * np.asarray(token_counts))
            np.add.at(self._buffer, token_ids, weight * np.asarray(token_counts))
        if len(pair_keys):
            self._pairs.add(pair_keys, weight * np.asarray(pair_counts, np.float64))

    def token(self, ids):
        return self.scale * self._raw(self._token, ids)

    def buffer(self, ids):
        return self.scale * self._raw(self._buffer, ids)

    def pair(self, keys):
        return self.scale * self._pairs.get(keys)

    @property
    def tracked_pairs(self) -> int:
        return len(self._pairs)

    def top_pairs(self, n: int):
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
            self._token[forgotten] = self._buffer[forgotten] = 0.0
            keys = self._pairs.keys
            gone = np.isin(keys >> PAIR_SHIFT, forgotten) | np.isin(keys & ((1 << PAIR_SHIFT) - 1), forgotten)
            self._pairs.drop(gone)
        if edit.adds:
            new_ids = np.array([w for w, _, _ in edit.adds], np.int64)
            keys = np.array([pack_pair(u, v) for _, u, v in edit.adds], np.int64)
            self._token[new_ids] = self._pairs.get(keys)
            self._buffer[new_ids] = 0.0
            self._pairs.drop(np.isin(self._pairs.keys, keys))
