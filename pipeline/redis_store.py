"""Ted-Tok's statistics in Redis: the core's ``StatsStore`` interface, every update one Lua script.

Lazy decay as in the memory store: raw sums S and one scale g (τ = g·S); a step multiplies g by
(1-α) and adds α·c/g to the keys it saw, so it costs O(keys it touches), not O(table). Keys of a
lineage share the hash tag ``{lineage}`` (one Redis Cluster slot, so a script may touch them all):

* ``tokmaint:{L}:meta`` hash: ``alpha``, ``scale``, ``step``, ``version`` (the tokenizer version the
  step counted with), ``offsets`` (JSON: partition → the next offset to read), ``revised`` (the
  step of the last revision);
* ``tokmaint:{L}:pending``: a revision applied to the statistics but not yet published;
* ``tokmaint:{L}:neighbours`` list of segments: LiteToken's adjacent-token pairs (within and
  across words), a segment a write (:class:`NeighbourSegment`: the pairs by the tokens' text, so
  a recycled id inherits nothing and nothing needs forgetting, with their EMA as of the write's
  step); a write appends one blob instead of touching each of its ~10^5 pairs, readers decay
  and sum the segments, and :meth:`RedisStatsStore.compact_neighbours` merges them into one,
  bounded to the strongest pairs; ``:residues``: the latest residues;
* ``tokmaint:{L}:token`` / ``:buffer`` hashes: token id → raw τ_token / τ_buffer;
* ``tokmaint:{L}:pairs`` sorted set: ``"u:v"`` (zero-padded) → −raw τ_pair, so that rank order
  is the memory store's order, largest first and ties in key order (top pairs by rank, cheaply).

Exactly once: a step's counts, its number, version and offsets are written by one script, which
does nothing when the store already holds that step (a replay after a crash), and refuses a step
that would skip one. A version made elsewhere is adopted by one script that forgets the changed
ids' statistics (nothing stale stays on a recycled id). A revision's edit is one script as well,
which keeps the revised version
until it is published (:meth:`RedisStatsStore.settle`): a crash between the two publishes it on
restart, never a version the statistics do not match. The pair tables are bounded: a
revision's script drops the weakest pairs beyond a maximum (``apply_revision(max_pairs=...)``).

    store = RedisStatsStore(redis.Redis(port=6379), lineage="news", alpha=0.01)
    store.apply_step(step=1, version=3, offsets={"docs:0": 64}, **counts)  # False: replayed
    store.token(np.array([1])), store.meta()["offsets"]
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis

from tokenizer_service.counting import PAIR_SHIFT, pack_pair, unpack_pair
from tokenizer_service.errors import TokmaintError
from tokenizer_service.stats_store import RENORMALISE_BELOW, StatsEdit, StatsStore

_LOW = (1 << PAIR_SHIFT) - 1

# KEYS: meta, token, buffer, pairs. ARGV: the last step, version ('' keeps it; another version
# than the statistics' is refused), offsets ('' keeps them), the renormalisation threshold,
# then packed little-endian arrays (one string each: no per-value argument to encode): token ids
# (int32), token counts (float64), pair firsts and seconds (int32), pair counts (float64); then
# the neighbour segment to append ('' for none); then the span: how many steps, ending at the
# last, the counts stand for (``stats_store.combine_steps``: weighed as the first one's).
# Returns 1, or 0 for steps the store has already (a replay).
_STEP = """
local meta, token, buffer, pairs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function f(x) return string.format('%.17g', x) end
-- Added in Lua and stored with 17 significant digits: HINCRBYFLOAT would keep 17 decimal places,
-- and lose what is small.
local function add(key, id, x) redis.call('HSET', key, id, f(tonumber(redis.call('HGET', key, id) or '0') + x)) end
local function unpack_all(fmt, width, s)
  local out = {}
  for i = 1, #s, width do out[#out + 1] = struct.unpack(fmt, s, i) end
  return out
end
local step, span = tonumber(ARGV[1]), tonumber(ARGV[11])
local have = tonumber(redis.call('HGET', meta, 'step') or '0')
if have >= step then return 0 end
if have ~= step - span then
  return redis.error_reply('step ' .. (step - span + 1) .. ' would skip step ' .. (have + 1))
end
local version = redis.call('HGET', meta, 'version')
if ARGV[2] ~= '' and version and version ~= ARGV[2] then
  return redis.error_reply('counted with version ' .. ARGV[2] .. ' but the statistics are at version ' .. version)
end
local alpha = tonumber(redis.call('HGET', meta, 'alpha'))
local scale = tonumber(redis.call('HGET', meta, 'scale') or '1')
local last = scale
for _ = 1, span do last = last * (1 - alpha) end
-- Renormalised before the steps when it falls due within them: τ is the same.
if last < tonumber(ARGV[4]) then
  for _, key in ipairs({token, buffer}) do
    local all = redis.call('HGETALL', key)
    for i = 1, #all, 2 do redis.call('HSET', key, all[i], f(tonumber(all[i + 1]) * scale)) end
  end
  local all = redis.call('ZRANGE', pairs, 0, -1, 'WITHSCORES')
  for i = 1, #all, 2 do redis.call('ZADD', pairs, f(tonumber(all[i + 1]) * scale), all[i]) end
  scale = 1
end
local weight = alpha / (scale * (1 - alpha))
for _ = 1, span do scale = scale * (1 - alpha) end
local ids, counts = unpack_all('<i4', 4, ARGV[5]), unpack_all('<d', 8, ARGV[6])
for k = 1, #ids do
  add(token, ids[k], weight * counts[k])
  add(buffer, ids[k], weight * counts[k])
end
local firsts, seconds, pair_counts = unpack_all('<i4', 4, ARGV[7]), unpack_all('<i4', 4, ARGV[8]),
  unpack_all('<d', 8, ARGV[9])
for k = 1, #firsts do
  -- Scores are -τ: ascending order is largest τ first with ties in member (= key) order.
  redis.call('ZINCRBY', pairs, f(-weight * pair_counts[k]), string.format('%07d:%07d', firsts[k], seconds[k]))
end
if ARGV[10] ~= '' then redis.call('RPUSH', KEYS[6], ARGV[10]) end
redis.call('HSET', meta, 'step', ARGV[1], 'scale', f(scale))
if ARGV[2] ~= '' then redis.call('HSET', meta, 'version', ARGV[2]) end
if ARGV[3] ~= '' then redis.call('HSET', meta, 'offsets', ARGV[3]) end
return 1
"""

# Lua: drop every pair that holds an id of ``forgotten`` (a set of ids): one scan of the table.
_FORGET_PAIRS = """
local function forget_pairs(pairs, forgotten)
  local gone = {}
  for _, m in ipairs(redis.call('ZRANGE', pairs, 0, -1)) do
    local u, v = string.match(m, '(%d+):(%d+)')
    if forgotten[tonumber(u)] or forgotten[tonumber(v)] then table.insert(gone, m) end
  end
  for k = 1, #gone, 1000 do redis.call('ZREM', pairs, unpack(gone, k, math.min(k + 999, #gone))) end
end
"""

# KEYS as above, then the pending revision. ARGV: the revision's step ('' for none: no guard),
# the pending revision to keep ('' for none), n_deletes, the most pairs to
# keep ('' for no bound: the weakest go), then w u v triples (deletes, in order), then w u v (adds). Returns 0 when the
# store has that step's revision already.
_EDIT = _FORGET_PAIRS + """
local meta, token, buffer, pairs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function f(x) return string.format('%.17g', x) end
local function add(key, id, x) redis.call('HSET', key, id, f(tonumber(redis.call('HGET', key, id) or '0') + x)) end
local function get(key, id) return tonumber(redis.call('HGET', key, id) or '0') end
if ARGV[1] ~= '' then
  if tonumber(redis.call('HGET', meta, 'revised') or '0') >= tonumber(ARGV[1]) then return 0 end
  redis.call('HSET', meta, 'revised', ARGV[1])
end
if ARGV[2] ~= '' then redis.call('SET', KEYS[5], ARGV[2]) end
local n = tonumber(ARGV[3])
local deletes, adds = {}, {}
for k = 0, (#ARGV - 4) / 3 - 1 do
  local triple = {ARGV[5 + 3 * k], ARGV[6 + 3 * k], ARGV[7 + 3 * k]}
  if k < n then table.insert(deletes, triple) else table.insert(adds, triple) end
end
local function member(u, v) return string.format('%07d:%07d', tonumber(u), tonumber(v)) end
local forgotten = {}
for _, d in ipairs(deletes) do
  local w, u, v = d[1], d[2], d[3]
  local credit = get(buffer, w)
  if u == v then
    add(token, u, 2 * credit)
    add(buffer, u, 2 * credit)
  else
    for _, p in ipairs({u, v}) do
      add(token, p, credit)
      add(buffer, p, credit)
    end
  end
  forgotten[tonumber(w)] = true
end
for _, d in ipairs(deletes) do
  redis.call('ZADD', pairs, f(-get(token, d[1])), member(d[2], d[3]))
end
if #deletes > 0 then
  for _, d in ipairs(deletes) do redis.call('HDEL', token, d[1]); redis.call('HDEL', buffer, d[1]) end
  forget_pairs(pairs, forgotten)
end
for _, a in ipairs(adds) do
  local m = member(a[2], a[3])
  redis.call('HSET', token, a[1], f(-tonumber(redis.call('ZSCORE', pairs, m) or '0')))
  redis.call('HSET', buffer, a[1], 0)
  redis.call('ZREM', pairs, m)
end
if ARGV[4] ~= '' then redis.call('ZREMRANGEBYRANK', pairs, tonumber(ARGV[4]), -1) end
return 1
"""


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
_COMPACT = """
if redis.sha1hex(redis.call('LINDEX', KEYS[1], 0) or '') ~= ARGV[2] then return 0 end
redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
redis.call('LPUSH', KEYS[1], ARGV[3])
return 1
"""


# KEYS: meta, token, buffer, pairs, pending. ARGV: the version the store counts with now, the
# version to adopt, then the ids whose token differs between the two. Forgets those ids'
# statistics (their own and every pair holding one), drops a pending revision the registry would
# not take, and moves to the new version; 0 when the store is elsewhere.
_ADOPT = _FORGET_PAIRS + """
local meta, token, buffer, pairs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if (redis.call('HGET', meta, 'version') or '') ~= ARGV[1] then return 0 end
local forgotten = {}
for k = 3, #ARGV do
  forgotten[tonumber(ARGV[k])] = true
  redis.call('HDEL', token, ARGV[k])
  redis.call('HDEL', buffer, ARGV[k])
end
if #ARGV > 2 then
  forget_pairs(pairs, forgotten)
end
redis.call('HSET', meta, 'version', ARGV[2])
redis.call('DEL', KEYS[5])
return 1
"""


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
        ids, inverse = np.unique(np.concatenate([firsts, seconds]), return_inverse=True)
        return cls(step=step, texts=token_texts[ids].tolist(), firsts=inverse[: len(firsts)],
                   seconds=inverse[len(firsts):], values=np.asarray(values, np.float64))

    def to_bytes(self) -> bytes:
        table = json.dumps(self.texts, ensure_ascii=False).encode("utf-8")
        return b"".join([self._HEADER.pack(self.step, len(table)), table, self.firsts.astype("<i4").tobytes(),
                         self.seconds.astype("<i4").tobytes(), self.values.astype("<f8").tobytes()])

    @classmethod
    def from_bytes(cls, blob: bytes) -> "NeighbourSegment":
        step, length = cls._HEADER.unpack_from(blob)
        start = cls._HEADER.size + length
        n = (len(blob) - start) // 16
        arrays = np.frombuffer(blob, "<i4", 2 * n, start)
        return cls(step=step, texts=json.loads(blob[cls._HEADER.size:start]), firsts=arrays[:n], seconds=arrays[n:],
                   values=np.frombuffer(blob, "<f8", n, start + 8 * n))

    @classmethod
    def merged(cls, segments: list["NeighbourSegment"], *, alpha: float, step: int,
               max_pairs: int | None = None) -> "NeighbourSegment":
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
        return {(texts[a], texts[b]): v for a, b, v in zip(self.firsts.tolist(), self.seconds.tolist(),
                                                             self.values.tolist())}


def _member(key: int) -> str:
    """A packed pair key as the sorted set's member ``"u:v"``, zero-padded so that the members'
    order is the keys' order (exact at any id; Lua's numbers are doubles, which a packed key can
    outgrow).

    >>> _member(pack_pair(3, 70))
    '0000003:0000070'
    """
    return f"{key >> PAIR_SHIFT:07d}:{key & _LOW:07d}"


def _key(member: bytes | str) -> int:
    u, _, v = (member.decode() if isinstance(member, bytes) else member).partition(":")
    return pack_pair(int(u), int(v))


class RedisStatsStore(StatsStore):
    """One lineage's statistics in Redis (``client``: a ``redis.Redis``), with decay ``alpha``."""

    def __init__(self, client: redis.Redis, *, lineage: str, alpha: float) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.client, self.lineage, self.alpha = client, lineage, alpha
        prefix = f"tokmaint:{{{lineage}}}"
        self.keys = [f"{prefix}:meta", f"{prefix}:token", f"{prefix}:buffer", f"{prefix}:pairs", f"{prefix}:pending",
                     f"{prefix}:neighbours", f"{prefix}:residues"]
        kept = client.hget(self.keys[0], "alpha")
        if kept is None:
            client.hsetnx(self.keys[0], "alpha", repr(alpha))
        elif float(kept) != alpha:
            raise ValueError(f"lineage {lineage!r} keeps statistics with alpha {float(kept)}, not {alpha}")
        self._step = client.register_script(_STEP)
        self._edit = client.register_script(_EDIT)
        self._advance = client.register_script(_ADVANCE)
        self._adopt = client.register_script(_ADOPT)
        self._compact = client.register_script(_COMPACT)

    @classmethod
    def open(cls, client: redis.Redis, *, lineage: str) -> "RedisStatsStore":
        """The statistics a lineage has already, with the decay they were kept with."""
        alpha = client.hget(f"tokmaint:{{{lineage}}}:meta", "alpha")
        if alpha is None:
            raise TokmaintError(f"Redis has no statistics of lineage {lineage!r}")
        return cls(client, lineage=lineage, alpha=float(alpha))

    # ----- the step ------------------------------------------------------------------------
    @property
    def step(self) -> int:
        return int(self.client.hget(self.keys[0], "step") or 0)

    def meta(self) -> dict[str, Any]:
        """``step``, ``version`` and ``offsets`` of the last step applied (what a restart resumes from)."""
        raw = {k.decode(): v.decode() for k, v in self.client.hgetall(self.keys[0]).items()}
        return {"step": int(raw.get("step", 0)), "version": int(raw["version"]) if raw.get("version") else None,
                "offsets": {int(p): o for p, o in json.loads(raw.get("offsets") or "{}").items()},
                "revised": int(raw.get("revised", 0))}

    def apply_step(self, *, step: int, token_ids: np.ndarray, token_counts: np.ndarray, pair_keys: np.ndarray,
                   pair_counts: np.ndarray, version: int | None = None, offsets: dict[int, int] | None = None,
                   neighbour_keys: np.ndarray | None = None, neighbour_counts: np.ndarray | None = None,
                   token_texts: np.ndarray | None = None, span: int = 1) -> bool:
        """Apply step ``step`` with its counts, the version they were counted with and the offsets
        it ends at, in one atomic write; False (nothing written) when the store has that step
        already. A version other than the statistics' is refused (another process moved them).
        With ``span``, the counts are those of the ``span`` steps ending at ``step``, combined by
        ``stats_store.combine_steps``, written as one. ``neighbour_keys`` and ``neighbour_counts``
        (combined alike; packed id pairs) with ``token_texts`` (id → the token's text) go in as one
        :class:`NeighbourSegment`."""
        pair_keys = np.asarray(pair_keys, np.int64)
        segment = b""
        if neighbour_keys is not None and len(neighbour_keys):
            # combine_steps weighs each step as the first; the segment's EMA is as of the last.
            values = np.asarray(neighbour_counts, np.float64) * self.alpha * (1.0 - self.alpha) ** (span - 1)
            segment = NeighbourSegment.of_ids(step=step, keys=neighbour_keys, values=values,
                                              token_texts=token_texts).to_bytes()
        args = [step, "" if version is None else version, "" if offsets is None else json.dumps(offsets),
                repr(RENORMALISE_BELOW),
                np.asarray(token_ids, "<i4").tobytes(), np.asarray(token_counts, "<f8").tobytes(),
                (pair_keys >> PAIR_SHIFT).astype("<i4").tobytes(), (pair_keys & _LOW).astype("<i4").tobytes(),
                np.asarray(pair_counts, "<f8").tobytes(),
                segment, span]
        return bool(self._step(keys=self.keys, args=args))

    def advance(self, *, step: int, offsets: dict[int, int]) -> bool:
        """Move the stored offsets past records no step counts (dead letters), if the store is
        still at ``step``; False otherwise."""
        return bool(self._advance(keys=self.keys[:1], args=[step, json.dumps(offsets)]))

    def apply_counts(self, *, token_ids, token_counts, pair_keys, pair_counts) -> None:
        self.apply_step(step=self.step + 1, token_ids=token_ids, token_counts=token_counts, pair_keys=pair_keys,
                        pair_counts=pair_counts)

    # ----- reading -------------------------------------------------------------------------
    def _scaled(self, key: str, fields: list[str]) -> np.ndarray:
        if not fields:
            return np.zeros(0)
        with self.client.pipeline() as pipe:  # MULTI/EXEC: the scale and the values of one moment
            pipe.hget(self.keys[0], "scale")
            if key == self.keys[3]:
                pipe.zmscore(key, fields)
            else:
                pipe.hmget(key, fields)
            scale, values = pipe.execute()
        values = np.array([float(v) if v is not None else 0.0 for v in values])
        return float(scale or 1.0) * (-values if key == self.keys[3] else values)  # pairs are kept as -τ

    def token(self, ids):
        return self._scaled(self.keys[1], [str(i) for i in np.asarray(ids).tolist()])

    def buffer(self, ids):
        return self._scaled(self.keys[2], [str(i) for i in np.asarray(ids).tolist()])

    def pair(self, keys):
        return self._scaled(self.keys[3], [_member(k) for k in np.asarray(keys).tolist()])

    def _neighbour_segments(self) -> tuple[int, list[bytes]]:
        with self.client.pipeline() as pipe:  # MULTI/EXEC: the step and the segments of one moment
            pipe.hget(self.keys[0], "step")
            pipe.lrange(self.keys[5], 0, -1)
            step, blobs = pipe.execute()
        return int(step or 0), blobs

    def neighbours(self) -> dict[tuple[str, str], float]:
        """Every neighbour pair (the two tokens' text) and its τ: adjacent tokens within and
        across words."""
        step, blobs = self._neighbour_segments()
        segments = [NeighbourSegment.from_bytes(b) for b in blobs]
        return NeighbourSegment.merged(segments, alpha=self.alpha, step=step).pairs()

    def neighbour_segments(self) -> int:
        return int(self.client.llen(self.keys[5]))

    def compact_neighbours(self, *, max_pairs: int | None = None) -> bool:
        """Merge the neighbour segments into one, keeping the strongest ``max_pairs`` pairs (the
        bound of the table); segments appended meanwhile stay. False when another compaction
        came first (nothing written)."""
        step, blobs = self._neighbour_segments()
        if not blobs:
            return True
        merged = NeighbourSegment.merged([NeighbourSegment.from_bytes(b) for b in blobs], alpha=self.alpha,
                                         step=step, max_pairs=max_pairs)
        head = hashlib.sha1(blobs[0]).hexdigest()
        return bool(self._compact(keys=self.keys[5:6], args=[len(blobs), head, merged.to_bytes()]))

    def keep_residues(self, residues: list[str], *, version: int) -> None:
        """The latest LiteToken residues of ``version`` (for ``stats show`` and the revisions)."""
        self.client.set(self.keys[6], json.dumps({"version": version, "residues": residues}, ensure_ascii=False))

    def residues(self) -> dict[str, Any] | None:
        kept = self.client.get(self.keys[6])
        return None if kept is None else json.loads(kept)

    @property
    def tracked_pairs(self) -> int:
        return int(self.client.zcard(self.keys[3]))

    def top_pairs(self, n: int):
        if n <= 0:
            return np.zeros(0, np.int64), np.zeros(0)
        with self.client.pipeline() as pipe:  # MULTI/EXEC
            pipe.hget(self.keys[0], "scale")
            pipe.zrange(self.keys[3], 0, n - 1, withscores=True)
            scale, rows = pipe.execute()
        # Scores are -τ: ascending is largest first, ties in member order, which is key order.
        return (np.array([_key(member) for member, _ in rows], np.int64),
                -float(scale or 1.0) * np.array([score for _, score in rows], np.float64))

    # ----- revisions -----------------------------------------------------------------------
    def apply_edit(self, edit: StatsEdit) -> None:
        self._apply_edit(edit, step="", pending=b"", max_pairs=None)

    def apply_revision(self, edit: StatsEdit, *, step: int, pending: bytes, max_pairs: int | None = None) -> bool:
        """The revision made after step ``step``: its edit, ``pending`` (the version still to
        publish) kept and the pair table pruned to ``max_pairs``, in one atomic write; False
        (nothing written) when the store has it already."""
        return self._apply_edit(edit, step=step, pending=pending, max_pairs=max_pairs)

    def _apply_edit(self, edit: StatsEdit, *, step: int | str, pending: bytes, max_pairs: int | None) -> bool:
        args: list[Any] = [step, pending, len(edit.deletes), "" if max_pairs is None else max_pairs]
        for w, u, v in edit.deletes + edit.adds:
            args += [w, u, v]
        return bool(self._edit(keys=self.keys, args=args))

    def adopt(self, *, current: int | None, version: int, changed_ids: list[int]) -> bool:
        """Move from version ``current`` to ``version`` (made elsewhere: a rollback, a LiteToken
        removal), forgetting the statistics of ``changed_ids`` (ids whose token differs) and a
        pending revision, in one write; False when the store is not at ``current`` (it moved)."""
        return bool(self._adopt(keys=self.keys, args=["" if current is None else current, version, *changed_ids]))

    def claim_version(self, version: int) -> int:
        """The version the statistics count with: ``version`` if they have none yet."""
        self.client.hsetnx(self.keys[0], "version", version)
        return int(self.client.hget(self.keys[0], "version"))

    def pending(self) -> bytes | None:
        """The revision kept by :meth:`apply_revision` and not yet :meth:`settle`-d."""
        return self.client.get(self.keys[4])

    def settle(self, version: int) -> None:
        """The pending revision is published as ``version``: later steps count with it."""
        with self.client.pipeline() as pipe:  # MULTI/EXEC
            pipe.hset(self.keys[0], "version", version)
            pipe.delete(self.keys[4])
            pipe.execute()
