"""Ted-Tok's statistics in Redis: the core's ``StatsStore`` interface, every write one Lua script.

The statistics (raw sums S and one scale g, τ = g·S, as in the memory store) are a snapshot and
a log of the steps written since: a step appends its counts to the log, one value, so it costs
O(keys it touches) whatever the size of the tables (Redis sorts nothing and parses no number).
Readers fold the log into the snapshot with the memory store's own arithmetic
(``MemoryStatsStore.apply_span``: the same numbers to the last bit), and a store object keeps
what it folded, so it reads only the log entries that came since. A revision, the adoption of
another version and a compaction fold the log, change the statistics in memory (the memory
store's ``apply_edit``, ``forget``, ``prune``) and write the result as the new snapshot in one
script, which refuses it when the snapshot or the log moved meanwhile (the caller folds again).
Keys of a lineage share the hash tag ``{lineage}`` (one Redis Cluster slot, so a script may
touch them all):

* ``tokmaint:{L}:meta`` hash: ``alpha``, ``step``, ``version`` (the tokenizer version the step
  counted with), ``offsets`` (JSON: partition → the next offset to read), ``revised`` (the step
  of the last revision), ``snapshot`` (how many snapshots were written: a reader's fold is
  current while this and the log's length are what it folded);
* ``tokmaint:{L}:snapshot``: the statistics as of the snapshot (``MemoryStatsStore.to_bytes``);
* ``tokmaint:{L}:log`` list: the steps written since, a write each (:func:`log_entry`: the counts
  of ``span`` steps combined by ``stats_store.combine_steps``);
* ``tokmaint:{L}:pending``: a revision applied to the statistics but not yet published;
* ``tokmaint:{L}:neighbours`` list of segments: LiteToken's adjacent-token pairs (within and
  across words), a segment a write (:class:`NeighbourSegment`: the pairs by the tokens' text, so
  a recycled id inherits nothing and nothing needs forgetting, with their EMA as of the write's
  step); readers decay and sum the segments, and :meth:`RedisStatsStore.compact_neighbours`
  merges them into one, bounded to the strongest pairs; ``:residues``: the latest residues.

Exactly once: a step's counts, its number, version and offsets are written by one script, which
does nothing when the store already holds that step (a replay after a crash), and refuses a step
that would skip one. A version made elsewhere is adopted by one script that writes the
statistics without the changed ids' (nothing stale stays on a recycled id). A revision's edit
is one script as well, which keeps the revised version until it is published
(:meth:`RedisStatsStore.settle`): a crash between the two publishes it on restart, never a
version the statistics do not match. The pair table is bounded: a revision keeps the strongest
pairs up to a maximum (``write_revision(max_pairs=...)``), and a long log is compacted
(:meth:`RedisStatsStore.compact`).

    store = RedisStatsStore(redis.Redis(port=6379), lineage="news", alpha=0.01)
    store.apply_step(counts, step=1, version=3, offsets={"docs:0": 64})  # False: replayed
    store.token(np.array([1])), store.meta()["offsets"]
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis

from tokenizer_service.counting import KeyCounts, pack_pair, unpack_pair
from tokenizer_service.errors import TokmaintError
from tokenizer_service.stats_store import MemoryStatsStore, StatsEdit, StatsStore

# KEYS: meta, log, neighbours. ARGV: the last step, version ('' keeps it; another version than
# the statistics' is refused), offsets ('' keeps them), the log entry, the neighbour segment to
# append ('' for none), the span: how many steps, ending at the last, the entry stands for.
# Returns 1, or 0 for steps the store has already (a replay).
_STEP = """
local meta = KEYS[1]
local step, span = tonumber(ARGV[1]), tonumber(ARGV[6])
local have = tonumber(redis.call('HGET', meta, 'step') or '0')
if have >= step then return 0 end
if have ~= step - span then
  return redis.error_reply('step ' .. (step - span + 1) .. ' would skip step ' .. (have + 1))
end
local version = redis.call('HGET', meta, 'version')
if ARGV[2] ~= '' and version and version ~= ARGV[2] then
  return redis.error_reply('counted with version ' .. ARGV[2] .. ' but the statistics are at version ' .. version)
end
redis.call('RPUSH', KEYS[2], ARGV[4])
if ARGV[5] ~= '' then redis.call('RPUSH', KEYS[3], ARGV[5]) end
redis.call('HSET', meta, 'step', ARGV[1])
if ARGV[2] ~= '' then redis.call('HSET', meta, 'version', ARGV[2]) end
if ARGV[3] ~= '' then redis.call('HSET', meta, 'offsets', ARGV[3]) end
if ARGV[7] ~= '' then redis.call('HSET', meta, 'bytes_per_token', ARGV[7]) end
redis.call('HINCRBY', meta, 'documents', ARGV[9])
for i = 10, #ARGV, 2 do redis.call('ZADD', KEYS[4], ARGV[i], ARGV[i + 1]) end
if ARGV[8] ~= '' then redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (step - tonumber(ARGV[8]) + 1)) end
return 1
"""

# KEYS: meta, log, snapshot. ARGV: the snapshot count and log length a fold began from. Returns the
# snapshot count, the snapshot (false when the fold's is current; none yet: false too) and the
# log entries the fold lacks (all of them when the snapshot moved), of one moment.
_READ = """
local count = redis.call('HGET', KEYS[1], 'snapshot') or '0'
if count == ARGV[1] then
  return {count, false, redis.call('LRANGE', KEYS[2], tonumber(ARGV[2]), -1)}
end
return {count, redis.call('GET', KEYS[3]) or false, redis.call('LRANGE', KEYS[2], 0, -1)}
"""

# Lua: write a new snapshot folded from snapshot ``count`` and the first ``folded`` log entries;
# with ``exact``, only when the log has no more (an edit goes after every step written).
_REPLACE = """
local function replace(meta, snapshot, log, count, folded, blob, exact)
  local length = redis.call('LLEN', log)
  if (redis.call('HGET', meta, 'snapshot') or '0') ~= count or length < folded or (exact and length > folded) then
    return false
  end
  redis.call('SET', snapshot, blob)
  redis.call('LTRIM', log, folded, -1)
  redis.call('HINCRBY', meta, 'snapshot', 1)
  return true
end
"""

# KEYS: meta, snapshot, log, pending. ARGV: the revision's step ('' for none: no guard), the
# pending revision to keep ('' for none), then the snapshot count and log length the edited
# statistics were folded from, and their snapshot. Returns 1; 0 when the store has that step's
# revision already; -1 when the statistics moved since the fold.
_EDIT = (
    _REPLACE
    + """
if ARGV[1] ~= '' and tonumber(redis.call('HGET', KEYS[1], 'revised') or '0') >= tonumber(ARGV[1]) then return 0 end
if not replace(KEYS[1], KEYS[2], KEYS[3], ARGV[3], tonumber(ARGV[4]), ARGV[5], true) then return -1 end
if ARGV[1] ~= '' then redis.call('HSET', KEYS[1], 'revised', ARGV[1]) end
if ARGV[2] ~= '' then redis.call('SET', KEYS[4], ARGV[2]) end
return 1
"""
)

# KEYS: meta, snapshot, log, pending. ARGV: the version the store counts with now, the version to
# adopt, then as for an edit (the snapshot '' when no id changed: the statistics stay). Moves to
# the new version, dropping a pending revision the registry would not take; 0 when the store is
# at another version, -1 when the statistics moved since the fold.
_ADOPT = (
    _REPLACE
    + """
if (redis.call('HGET', KEYS[1], 'version') or '') ~= ARGV[1] then return 0 end
if ARGV[5] ~= '' and not replace(KEYS[1], KEYS[2], KEYS[3], ARGV[3], tonumber(ARGV[4]), ARGV[5], true) then
  return -1
end
redis.call('HSET', KEYS[1], 'version', ARGV[2])
redis.call('DEL', KEYS[4])
return 1
"""
)

# KEYS: meta, snapshot, log. ARGV as for an edit's last three. Log entries written since the
# fold stay (they follow the new snapshot as they followed the old); -1 when the snapshot moved.
_COMPACT = (
    _REPLACE
    + """
return replace(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]), ARGV[3], false) and 1 or -1
"""
)

# KEYS: meta. ARGV: the store's step, offsets. Moves the offsets past records no step counted
# (dead ones) while the store is still at that step; returns 0 otherwise.
_ADVANCE = """
if tonumber(redis.call('HGET', KEYS[1], 'step') or '0') ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'offsets', ARGV[2])
return 1
"""


# KEYS: neighbours. ARGV: how many segments from the head were merged, the sha1 of the head one
# (another compaction meanwhile changes it), the merged segment. Replaces those segments with
# it (later ones, appended meanwhile, stay); 0 when the head is not what was merged.
_COMPACT_NEIGHBOURS = """
if redis.sha1hex(redis.call('LINDEX', KEYS[1], 0) or '') ~= ARGV[2] then return 0 end
redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
redis.call('LPUSH', KEYS[1], ARGV[3])
return 1
"""

_ENTRY = struct.Struct("<qqq")  # span, tokens, pairs


def log_entry(counts: KeyCounts, *, span: int) -> bytes:
    """One write's counts as a log entry (:func:`apply_log_entry` folds it).

    >>> s = MemoryStatsStore(alpha=0.5)
    >>> apply_log_entry(s, log_entry(KeyCounts(np.array([1]), np.array([4.0]), np.array([7]), np.array([2.0])), span=1))
    >>> s.token(np.array([1])).tolist(), s.pair(np.array([7])).tolist(), s.step
    ([2.0], [1.0], 1)
    """
    return b"".join(
        [
            _ENTRY.pack(span, len(counts.token_ids), len(counts.pair_keys)),
            np.asarray(counts.token_ids, "<i8").tobytes(),
            np.asarray(counts.token_counts, "<f8").tobytes(),
            np.asarray(counts.pair_keys, "<i8").tobytes(),
            np.asarray(counts.pair_counts, "<f8").tobytes(),
        ]
    )


def apply_log_entry(store: MemoryStatsStore, entry: bytes) -> None:
    """Fold one :func:`log_entry` into ``store`` (``apply_span``: the steps it stands for)."""
    span, tokens, pairs = _ENTRY.unpack_from(entry)
    at = _ENTRY.size
    counts = KeyCounts(
        token_ids=np.frombuffer(entry, "<i8", tokens, at),
        token_counts=np.frombuffer(entry, "<f8", tokens, at + 8 * tokens),
        pair_keys=np.frombuffer(entry, "<i8", pairs, at + 16 * tokens),
        pair_counts=np.frombuffer(entry, "<f8", pairs, at + 16 * tokens + 8 * pairs),
    )
    store.apply_span(counts, span=span)


@dataclass(frozen=True)
class NeighbourSegment:
    """Neighbour pairs by the two tokens' text, with their EMA as of step ``step``: τ at a later
    step t is ``values · (1-α)^(t - step)`` (no global scale, so segments add up as they are).

    >>> seg = NeighbourSegment(step=3, texts=["a", "b"], firsts=np.array([0]), seconds=np.array([1]),
    ...                        values=np.array([0.5]))
    >>> NeighbourSegment.from_bytes(seg.to_bytes()).pairs()
    {('a', 'b'): 0.5}
    """

    step: int
    texts: list[str]  # the tokens' texts; firsts and seconds index them
    firsts: np.ndarray
    seconds: np.ndarray
    values: np.ndarray

    _HEADER = struct.Struct("<qI")  # step, length of the JSON list of texts

    @classmethod
    def of_ids(cls, *, step: int, keys: np.ndarray, values: np.ndarray, token_texts: np.ndarray) -> "NeighbourSegment":
        """From packed id pairs (``counting.pack_pair``) and ``token_texts`` (id → text)."""
        firsts, seconds = unpack_pair(np.asarray(keys, np.int64))
        # The ids in use, in order, and each id's place among them: what np.unique with its
        # inverse gives, without sorting ~10^5 pairs (ids are below the version's id space).
        used = np.zeros(len(token_texts), bool)
        used[firsts] = used[seconds] = True
        place = np.cumsum(used) - 1
        return cls(
            step=step,
            texts=token_texts[used].tolist(),
            firsts=place[firsts],
            seconds=place[seconds],
            values=np.asarray(values, np.float64),
        )

    def to_bytes(self) -> bytes:
        table = json.dumps(self.texts, ensure_ascii=False).encode("utf-8")
        return b"".join(
            [
                self._HEADER.pack(self.step, len(table)),
                table,
                self.firsts.astype("<i4").tobytes(),
                self.seconds.astype("<i4").tobytes(),
                self.values.astype("<f8").tobytes(),
            ]
        )

    @classmethod
    def from_bytes(cls, blob: bytes) -> "NeighbourSegment":
        step, length = cls._HEADER.unpack_from(blob)
        start = cls._HEADER.size + length
        n = (len(blob) - start) // 16
        arrays = np.frombuffer(blob, "<i4", 2 * n, start)
        return cls(
            step=step,
            texts=json.loads(blob[cls._HEADER.size : start]),
            firsts=arrays[:n],
            seconds=arrays[n:],
            values=np.frombuffer(blob, "<f8", n, start + 8 * n),
        )

    @classmethod
    def merged(
        cls, segments: list["NeighbourSegment"], *, alpha: float, step: int, max_pairs: int | None = None
    ) -> "NeighbourSegment":
        """One segment as of ``step`` with the pairs of all, each decayed to it; with
        ``max_pairs``, only the strongest that many (ties in text order)."""
        index: dict[str, int] = {}
        keys, values = [], []
        for segment in segments:
            local = np.array([index.setdefault(t, len(index)) for t in segment.texts] or [0], np.int64)
            keys.append(pack_pair(local[segment.firsts], local[segment.seconds]))
            values.append(segment.values * (1.0 - alpha) ** (step - segment.step))
        unique, inverse = np.unique(np.concatenate(keys or [np.zeros(0, np.int64)]), return_inverse=True)
        summed = np.bincount(inverse, weights=np.concatenate(values or [np.zeros(0)]), minlength=len(unique))
        texts = np.array(list(index), dtype=object)
        firsts, seconds = unpack_pair(unique)
        if max_pairs is not None and len(unique) > max_pairs:
            order = np.lexsort((texts[seconds].astype(str), texts[firsts].astype(str), -summed))[:max_pairs]
            unique, summed, firsts, seconds = unique[order], summed[order], firsts[order], seconds[order]
        return cls.of_ids(step=step, keys=unique, values=summed, token_texts=texts)

    def pairs(self) -> dict[tuple[str, str], float]:
        texts = self.texts
        return {
            (texts[a], texts[b]): v
            for a, b, v in zip(self.firsts.tolist(), self.seconds.tolist(), self.values.tolist())
        }


class RedisStatsStore(StatsStore):
    """One lineage's statistics in Redis (``client``: a ``redis.Redis``), with decay ``alpha``."""

    def __init__(self, client: redis.Redis, *, lineage: str, alpha: float) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.client, self.lineage, self.alpha = client, lineage, alpha
        prefix = f"tokmaint:{{{lineage}}}"
        self.keys = [
            f"{prefix}:{name}" for name in ("meta", "snapshot", "log", "pending", "neighbours", "residues", "ids")
        ]
        kept, scale = client.hmget(self.keys[0], ["alpha", "scale"])
        if scale is not None:  # the layout before the snapshot and the log kept the scale in meta
            raise TokmaintError(
                f"lineage {lineage!r} has statistics in Redis in an earlier layout, which this "
                f"version does not read; delete the keys tokmaint:{{{lineage}}}:* to start its "
                "statistics over"
            )
        if kept is None:
            client.hsetnx(self.keys[0], "alpha", repr(alpha))
        elif float(kept) != alpha:
            raise ValueError(f"lineage {lineage!r} keeps statistics with alpha {float(kept)}, not {alpha}")
        self._step = client.register_script(_STEP)
        self._read = client.register_script(_READ)
        self._edit = client.register_script(_EDIT)
        self._adopt = client.register_script(_ADOPT)
        self._compact = client.register_script(_COMPACT)
        self._advance = client.register_script(_ADVANCE)
        self._compact_neighbours = client.register_script(_COMPACT_NEIGHBOURS)
        # What this object folded: the snapshot count, the log entries, the statistics (one
        # thread at a time: the job plans on one thread and commits on another).
        self._folded: tuple[bytes | None, int, MemoryStatsStore] = (None, 0, MemoryStatsStore(alpha=alpha))
        self._fold_lock = threading.Lock()

    @classmethod
    def open(cls, client: redis.Redis, *, lineage: str) -> "RedisStatsStore":
        """The statistics a lineage has already, with the decay they were kept with."""
        alpha = client.hget(cls.meta_key(lineage), "alpha")
        if alpha is None:
            raise TokmaintError(f"Redis has no statistics of lineage {lineage!r}")
        return cls(client, lineage=lineage, alpha=float(alpha))

    @staticmethod
    def meta_key(lineage: str) -> str:
        """The key of a lineage's meta hash (its step, version, offsets, decay).

        >>> RedisStatsStore.meta_key("git")
        'tokmaint:{git}:meta'
        """
        return f"tokmaint:{{{lineage}}}:meta"

    @classmethod
    def counted_version(cls, client: redis.Redis, *, lineage: str) -> int | None:
        """The version a lineage's statistics count with (published: a revision counts once it is
        settled), None before they have one; one read, without opening them (a parallel counter of
        the Flink job asks it at each window)::

            RedisStatsStore.counted_version(redis.Redis(), lineage="git")   # 3
        """
        version = client.hget(cls.meta_key(lineage), "version")
        return None if version is None else int(version)

    # ----- the step ------------------------------------------------------------------------
    @property
    def step(self) -> int:
        return int(self.client.hget(self.keys[0], "step") or 0)

    def meta(self) -> dict[str, Any]:
        """``step``, ``version`` and ``offsets`` of the last step applied (what a restart resumes from)."""
        raw = {k.decode(): v.decode() for k, v in self.client.hgetall(self.keys[0]).items()}
        return {
            "step": int(raw.get("step", 0)),
            "version": int(raw["version"]) if raw.get("version") else None,
            "offsets": {int(p): o for p, o in json.loads(raw.get("offsets") or "{}").items()},
            "revised": int(raw.get("revised", 0)),
            "bytes_per_token": float(raw["bytes_per_token"]) if raw.get("bytes_per_token") else None,
            "documents": int(raw.get("documents", 0)),
        }

    def apply_step(
        self,
        counts: KeyCounts,
        *,
        step: int,
        version: int | None = None,
        offsets: dict[int, int] | None = None,
        neighbour_keys: np.ndarray | None = None,
        neighbour_counts: np.ndarray | None = None,
        token_texts: np.ndarray | None = None,
        span: int = 1,
        bytes_per_token: float | None = None,
        ids: Sequence[tuple[int, str]] = (),
        keep_ids_steps: int | None = None,
        documents: int = 0,
    ) -> bool:
        """Apply step ``step`` with its counts, the version they were counted with and the offsets
        it ends at, in one atomic write; False (nothing written) when the store has that step
        already. A version other than the statistics' is refused (another process moved them).
        With ``span``, the counts are those of the ``span`` steps ending at ``step``, combined by
        ``stats_store.combine_steps``, written as one. ``neighbour_keys`` and ``neighbour_counts``
        (combined alike; packed id pairs) with ``token_texts`` (id → the token's text) go in as one
        :class:`NeighbourSegment`. ``bytes_per_token`` (of the last step) is kept with them: what a
        restarted job records beside the next version it publishes. ``ids``: (step, id) of the
        steps' documents (:meth:`recent_ids` has them), kept for ``keep_ids_steps`` steps ending at
        ``step``; ``documents``: how many the steps counted, added to the lineage's total (``meta``)."""
        segment = b""
        if neighbour_keys is not None and len(neighbour_keys):
            # combine_steps weighs each step as the first; the segment's EMA is as of the last.
            values = np.asarray(neighbour_counts, np.float64) * self.alpha * (1.0 - self.alpha) ** (span - 1)
            segment = NeighbourSegment.of_ids(
                step=step, keys=neighbour_keys, values=values, token_texts=token_texts
            ).to_bytes()
        entry = log_entry(counts, span=span)
        args = [
            step,
            "" if version is None else version,
            "" if offsets is None else json.dumps(offsets),
            entry,
            segment,
            span,
            "" if bytes_per_token is None else repr(float(bytes_per_token)),
            "" if keep_ids_steps is None else keep_ids_steps,
            documents,
            *(x for pair in ids for x in pair),
        ]
        return bool(self._step(keys=[self.keys[0], self.keys[2], self.keys[4], self.keys[6]], args=args))

    def recent_ids(self) -> dict[str, int]:
        """The documents' ids of the last steps written (``apply_step``'s ``ids``), each with its step."""
        return {i.decode(): int(step) for i, step in self.client.zrange(self.keys[6], 0, -1, withscores=True)}

    def advance(self, *, step: int, offsets: dict[int, int]) -> bool:
        """Move the stored offsets past records no step counts (dead letters), if the store is
        still at ``step``; False otherwise."""
        return bool(self._advance(keys=self.keys[:1], args=[step, json.dumps(offsets)]))

    def apply_counts(self, counts: KeyCounts) -> None:
        self.apply_step(counts, step=self.step + 1)

    # ----- reading -------------------------------------------------------------------------
    def _fold(self) -> tuple[bytes, int, MemoryStatsStore]:
        """The statistics as Redis has them now (the snapshot count and log length they fold,
        and themselves), reading only what came since the last fold. Callers hold the lock; the
        statistics returned are this object's: copy before changing them."""
        count, entries, folded = self._folded
        now, snapshot, new = self._read(keys=[self.keys[0], self.keys[2], self.keys[1]], args=[count or b"", entries])
        if now != count:  # another snapshot: from it
            entries = 0
            folded = (
                MemoryStatsStore(alpha=self.alpha)
                if not snapshot
                else MemoryStatsStore.from_bytes(snapshot, alpha=self.alpha)
            )
        elif new:
            folded = folded.copy()  # a caller may hold the one before
        for entry in new:
            apply_log_entry(folded, entry)
        self._folded = (now, entries + len(new), folded)
        return self._folded

    def _statistics(self) -> MemoryStatsStore:
        with self._fold_lock:
            return self._fold()[2]

    def token(self, ids):
        return self._statistics().token(ids)

    def buffer(self, ids):
        return self._statistics().buffer(ids)

    def pair(self, keys):
        return self._statistics().pair(keys)

    @property
    def tracked_pairs(self) -> int:
        return self._statistics().tracked_pairs

    def top_pairs(self, n: int):
        return self._statistics().top_pairs(n)

    def log_entries(self) -> int:
        """Writes in the log since the last snapshot (what :meth:`compact` folds away)."""
        return int(self.client.llen(self.keys[2]))

    def _rewrite(self, change: Callable[[MemoryStatsStore], None], write: Callable[[bytes, int, bytes], int]) -> int:
        """Fold, ``change`` a copy of the statistics, ``write(count, entries, snapshot)`` it;
        again from a new fold while the write answers -1 (the statistics moved meanwhile).
        Returns the write's answer."""
        with self._fold_lock:
            while True:
                count, entries, folded = self._fold()
                changed = folded.copy()
                change(changed)
                snapshot = changed.to_bytes()
                answer = int(write(count, entries, snapshot))
                if answer != -1:
                    if answer == 1:  # the snapshot written is the next count's
                        self._folded = (str(int(count or 0) + 1).encode(), 0, changed)
                    return answer

    def compact(self) -> None:
        """Fold the log into a new snapshot (entries written meanwhile stay in the log)."""
        self._rewrite(
            lambda stats: None,
            lambda count, entries, snapshot: self._compact(keys=self.keys[:3], args=[count or b"0", entries, snapshot]),
        )

    def _neighbour_segments(self) -> tuple[int, list[bytes]]:
        with self.client.pipeline() as pipe:  # MULTI/EXEC: the step and the segments of one moment
            pipe.hget(self.keys[0], "step")
            pipe.lrange(self.keys[4], 0, -1)
            step, blobs = pipe.execute()
        return int(step or 0), blobs

    def neighbours(self) -> dict[tuple[str, str], float]:
        """Every neighbour pair (the two tokens' text) and its τ: adjacent tokens within and
        across words."""
        step, blobs = self._neighbour_segments()
        segments = [NeighbourSegment.from_bytes(b) for b in blobs]
        return NeighbourSegment.merged(segments, alpha=self.alpha, step=step).pairs()

    def neighbour_segments(self) -> int:
        return int(self.client.llen(self.keys[4]))

    def compact_neighbours(self, *, max_pairs: int | None = None) -> bool:
        """Merge the neighbour segments into one, keeping the strongest ``max_pairs`` pairs (the
        bound of the table); segments appended meanwhile stay. False when another compaction
        came first (nothing written)."""
        step, blobs = self._neighbour_segments()
        if not blobs:
            return True
        merged = NeighbourSegment.merged(
            [NeighbourSegment.from_bytes(b) for b in blobs], alpha=self.alpha, step=step, max_pairs=max_pairs
        )
        head = hashlib.sha1(blobs[0]).hexdigest()
        return bool(self._compact_neighbours(keys=self.keys[4:5], args=[len(blobs), head, merged.to_bytes()]))

    def keep_residues(self, residues: list[str], *, version: int) -> None:
        """The latest LiteToken residues of ``version`` (for ``stats show`` and the revisions)."""
        self.client.set(self.keys[5], json.dumps({"version": version, "residues": residues}, ensure_ascii=False))

    def residues(self) -> dict[str, Any] | None:
        kept = self.client.get(self.keys[5])
        return None if kept is None else json.loads(kept)

    # ----- revisions -----------------------------------------------------------------------
    def apply_edit(self, edit: StatsEdit) -> None:
        self._apply_edit(edit, step="", pending=b"", max_pairs=None)

    def write_revision(self, edit: StatsEdit, *, step: int, pending: bytes, max_pairs: int | None = None) -> bool:
        """The revision made after step ``step``: its edit, ``pending`` (the version still to
        publish) kept and the pair table pruned to ``max_pairs``, in one atomic write; False
        (nothing written) when the store has it already."""
        return self._apply_edit(edit, step=step, pending=pending, max_pairs=max_pairs)

    def _apply_edit(self, edit: StatsEdit, *, step: int | str, pending: bytes, max_pairs: int | None) -> bool:
        def change(stats: MemoryStatsStore) -> None:
            stats.apply_edit(edit)
            if max_pairs is not None:
                stats.prune(max_pairs)

        return (
            self._rewrite(
                change,
                lambda count, entries, snapshot: self._edit(
                    keys=self.keys[:4], args=[step, pending, count or b"0", entries, snapshot]
                ),
            )
            == 1
        )

    def adopt(self, *, current: int | None, version: int, changed_ids: list[int]) -> bool:
        """Move from version ``current`` to ``version`` (made elsewhere: a rollback, a LiteToken
        removal), forgetting the statistics of ``changed_ids`` (ids whose token differs) and a
        pending revision, in one write; False when the store is not at ``current`` (it moved)."""
        at = "" if current is None else current
        if not changed_ids:
            return self._adopt(keys=self.keys[:4], args=[at, version, "", 0, ""]) == 1
        return (
            self._rewrite(
                lambda stats: stats.forget(changed_ids),
                lambda count, entries, snapshot: self._adopt(
                    keys=self.keys[:4], args=[at, version, count or b"0", entries, snapshot]
                ),
            )
            == 1
        )

    def claim_version(self, version: int) -> int:
        """The version the statistics count with: ``version`` if they have none yet."""
        self.client.hsetnx(self.keys[0], "version", version)
        return int(self.client.hget(self.keys[0], "version"))

    def pending(self) -> bytes | None:
        """The revision kept by :meth:`write_revision` and not yet :meth:`settle`-d."""
        return self.client.get(self.keys[3])

    def settle(self, version: int) -> None:
        """The pending revision is published as ``version``: later steps count with it."""
        with self.client.pipeline() as pipe:  # MULTI/EXEC
            pipe.hset(self.keys[0], "version", version)
            pipe.delete(self.keys[3])
            pipe.execute()
