"""Contract tests every stats store backend must pass: memory, and Redis (a redis-server of the
test session's own)."""

import uuid

import numpy as np
import pytest
import redis

from pipeline.redis_store import RedisStatsStore
from tokenizer_service.counting import KeyCounts, pack_pair
from tokenizer_service.stats_store import MemoryStatsStore, SparseVector, StatsEdit


@pytest.fixture(params=["memory", "redis"])
def make_store(request):
    if request.param == "memory":
        return lambda alpha: MemoryStatsStore(alpha=alpha)
    client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
    return lambda alpha: RedisStatsStore(client, lineage=uuid.uuid4().hex, alpha=alpha)


def step(store, tokens: dict[int, float], pairs: dict[tuple[int, int], float] | None = None):
    pairs = pairs or {}
    keys = np.array([pack_pair(u, v) for u, v in pairs], np.int64)
    store.apply_counts(
        KeyCounts(
            token_ids=np.array(list(tokens), np.int64),
            token_counts=np.array(list(tokens.values())),
            pair_keys=keys,
            pair_counts=np.array(list(pairs.values()), np.float64),
        )
    )


def test_ema_matches_the_recurrence(make_store):
    alpha = 0.3
    store = make_store(alpha)
    rng = np.random.default_rng(1)
    tau = np.zeros(5)
    pair_tau = 0.0
    for _ in range(2000):  # long enough to force several renormalisations
        c = rng.integers(0, 5, size=5).astype(float)
        seen = {i: c[i] for i in range(5) if c[i] or rng.random() < 0.5}
        step(store, seen, {(0, 1): c[0]})
        tau = (1 - alpha) * tau + alpha * c
        pair_tau = (1 - alpha) * pair_tau + alpha * c[0]
    np.testing.assert_allclose(store.token(np.arange(5)), tau, rtol=1e-9)
    np.testing.assert_allclose(store.buffer(np.arange(5)), tau, rtol=1e-9)
    assert store.pair(np.array([pack_pair(0, 1)]))[0] == pytest.approx(pair_tau, rel=1e-9)
    assert store.step == 2000


def test_unknown_keys_read_as_zero(make_store):
    store = make_store(0.5)
    assert store.token(np.array([99])).tolist() == [0.0]
    assert store.pair(np.array([pack_pair(1, 2)])).tolist() == [0.0]
    assert [len(x) for x in store.top_pairs(5)] == [0, 0]


def test_top_pairs_largest_first_with_stable_ties(make_store):
    store = make_store(0.5)
    step(store, {}, {(1, 2): 3.0, (2, 3): 5.0, (0, 1): 3.0, (4, 4): 1.0})
    keys, values = store.top_pairs(3)
    assert keys.tolist() == [pack_pair(2, 3), pack_pair(0, 1), pack_pair(1, 2)]
    assert values.tolist() == [2.5, 1.5, 1.5]
    assert store.tracked_pairs == 4


def test_delete_redistributes_buffer_and_restores_pair(make_store):
    store = make_store(0.5)
    step(store, {1: 4.0, 2: 6.0}, {(1, 2): 8.0})
    store.apply_edit(StatsEdit(adds=[(3, 1, 2)]))  # token 3 = (1, 2)
    assert store.token(np.array([3])).tolist() == [4.0] and store.buffer(np.array([3])).tolist() == [0.0]
    assert store.pair(np.array([pack_pair(1, 2)])).tolist() == [0.0]  # the merged pair left the table
    step(store, {1: 2.0, 2: 2.0, 3: 10.0}, {(3, 3): 1.0, (1, 3): 1.0})
    token_3, buffer_3 = store.token(np.array([3]))[0], store.buffer(np.array([3]))[0]
    before = store.token(np.array([1, 2]))
    store.apply_edit(StatsEdit(deletes=[(3, 1, 2)]))
    np.testing.assert_allclose(store.token(np.array([1, 2])), before + buffer_3)
    assert store.pair(np.array([pack_pair(1, 2)]))[0] == pytest.approx(token_3)
    # Nothing of token 3 survives: not its own stats, not the pairs it was part of.
    assert store.token(np.array([3])).tolist() == [0.0] and store.buffer(np.array([3])).tolist() == [0.0]
    assert store.pair(np.array([pack_pair(3, 3), pack_pair(1, 3)])).tolist() == [0.0, 0.0]


def test_recycled_id_starts_clean(make_store):
    store = make_store(0.5)
    step(store, {1: 2.0, 2: 2.0, 5: 7.0}, {(5, 1): 3.0, (1, 2): 4.0})
    # id 5 (old token, parents 1 and 2) is deleted and reused for the new token (1, 2)... of a
    # different pair: (2, 1).
    step(store, {}, {(2, 1): 6.0})
    pair_21 = store.pair(np.array([pack_pair(2, 1)]))[0]
    store.apply_edit(StatsEdit(deletes=[(5, 1, 2)], adds=[(5, 2, 1)]))
    assert store.token(np.array([5])).tolist() == [pair_21]
    assert store.buffer(np.array([5])).tolist() == [0.0]
    assert store.pair(np.array([pack_pair(5, 1)])).tolist() == [0.0]


def test_self_pair_delete_credits_the_parent_twice(make_store):
    store = make_store(0.5)
    store.apply_edit(StatsEdit(adds=[(2, 1, 1)]))
    step(store, {2: 4.0})
    store.apply_edit(StatsEdit(deletes=[(2, 1, 1)]))
    assert store.token(np.array([1])).tolist() == [4.0]  # 2 occurrences of "aa" -> 4 "a"... at τ=2


def test_sparse_vector_set_and_drop():
    v = SparseVector()
    v.set(np.array([3, 1]), np.array([1.0, 2.0]))
    v.set(np.array([1]), np.array([5.0]))
    v.drop(v.keys == 3)
    assert v.keys.tolist() == [1] and v.values.tolist() == [5.0]
