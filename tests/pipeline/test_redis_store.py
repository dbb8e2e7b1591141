"""The Redis statistics store beyond the shared contract: it equals the memory store through a
random run of steps and revisions, applies each step exactly once with its version and offsets,
keeps a lineage's keys in one Cluster slot, and prunes the pair table to a bound; all of it on one
redis-server and on a three-node Redis Cluster, where lineages shard over the nodes."""

import uuid

import numpy as np
import pytest
import redis

from pipeline.parts import connect_redis
from pipeline.redis_store import RedisStatsStore
from tokenizer_service.counting import KeyCounts, StepCounts, pack_pair
from tokenizer_service.errors import TokmaintError
from tokenizer_service.stats_store import RENORMALISE_BELOW, MemoryStatsStore, StatsEdit, combine_steps


@pytest.fixture(params=["redis-server", "redis-cluster"])
def client(request):
    """A client of one redis-server, or of a three-node Redis Cluster (``connect_redis`` tells
    them apart): every test of the store runs on both."""
    connection = connect_redis(
        request.getfixturevalue("redis_url" if request.param == "redis-server" else "redis_cluster")
    )
    yield connection
    connection.close()


def _counts(rng, ids: int) -> StepCounts:
    tokens = np.unique(rng.integers(0, ids, size=rng.integers(1, 12)))
    pairs = np.unique(pack_pair(rng.integers(0, ids, size=8), rng.integers(0, ids, size=8)))
    return StepCounts(
        token_ids=tokens,
        token_counts=rng.integers(1, 9, size=len(tokens)).astype(float),
        pair_keys=pairs,
        pair_counts=rng.integers(1, 9, size=len(pairs)).astype(float),
        n_bytes=0,
        n_tokens=0,
    )


def test_equals_the_memory_store_through_steps_and_revisions(client):
    rng = np.random.default_rng(7)
    memory, stored = MemoryStatsStore(alpha=0.2), RedisStatsStore(client, lineage=uuid.uuid4().hex, alpha=0.2)
    for step in range(300):
        counts = _counts(rng, 40)
        memory.apply_counts(counts)
        stored.apply_counts(counts)
        if step % 25 == 24:  # a revision: delete two tokens (child first), add two
            w = rng.choice(40, size=4, replace=False).tolist()
            u, v = rng.integers(0, 40, size=4).tolist(), rng.integers(0, 40, size=4).tolist()
            edit = StatsEdit(
                deletes=[(w[0], u[0], v[0]), (w[1], u[1], v[1])], adds=[(w[2], u[2], v[2]), (w[3], u[3], v[3])]
            )
            memory.apply_edit(edit)
            stored.apply_edit(edit)
    _assert_same(stored, memory)
    # Another reader (a process of its own) folds the snapshot and the log to the same numbers.
    _assert_same(RedisStatsStore.open(client, lineage=stored.lineage), memory)


def _assert_same(stored: RedisStatsStore, memory: MemoryStatsStore, ids: int = 45) -> None:
    """The same statistics to the last bit: tokens, buffers, every pair in rank order."""
    assert stored.token(np.arange(ids)).tolist() == memory.token(np.arange(ids)).tolist()
    assert stored.buffer(np.arange(ids)).tolist() == memory.buffer(np.arange(ids)).tolist()
    assert stored.tracked_pairs == memory.tracked_pairs
    (stored_keys, stored_values), (memory_keys, memory_values) = (
        stored.top_pairs(memory.tracked_pairs),
        memory.top_pairs(memory.tracked_pairs),
    )
    assert stored_keys.tolist() == memory_keys.tolist() and stored_values.tolist() == memory_values.tolist()


def test_an_edit_folds_again_when_another_writer_moved_the_statistics(client):
    """The edit is computed from a fold; a step written meanwhile by another writer makes the
    script refuse that fold, and the edit is made again after the step, as it would be in memory."""
    lineage, rng = uuid.uuid4().hex, np.random.default_rng(11)
    memory, first = MemoryStatsStore(alpha=0.3), RedisStatsStore(client, lineage=lineage, alpha=0.3)
    other = RedisStatsStore.open(client, lineage=lineage)
    for _ in range(5):
        counts = _counts(rng, 20)
        memory.apply_counts(counts)
        first.apply_counts(counts)
    assert first.tracked_pairs == memory.tracked_pairs  # first has folded these steps
    counts = _counts(rng, 20)
    memory.apply_counts(counts)
    other.apply_counts(counts)  # first does not know of it
    edit = StatsEdit(deletes=[(3, 1, 2)], adds=[(3, 4, 5)])
    memory.apply_edit(edit)
    first.apply_edit(edit)
    _assert_same(first, memory, ids=20)
    _assert_same(other, memory, ids=20)


def test_compaction_folds_the_log_and_keeps_steps_written_since(client):
    """A step another writer appends between the fold and the snapshot's write stays in the log,
    after the new snapshot, as it followed the old."""
    lineage, rng = uuid.uuid4().hex, np.random.default_rng(13)
    memory = MemoryStatsStore(alpha=0.3)
    late = _counts(rng, 20)

    class Racing(RedisStatsStore):
        def _fold(self):
            folded = super()._fold()
            if self.log_entries() == 6:  # the compaction's fold: another writer's step comes now
                RedisStatsStore.open(client, lineage=lineage).apply_counts(late)
            return folded

    store = Racing(client, lineage=lineage, alpha=0.3)
    for _ in range(6):
        counts = _counts(rng, 20)
        memory.apply_counts(counts)
        store.apply_counts(counts)
    memory.apply_counts(late)
    store.compact()
    assert store.log_entries() == 1
    _assert_same(store, memory, ids=20)
    _assert_same(RedisStatsStore.open(client, lineage=lineage), memory, ids=20)


def test_a_step_is_applied_once_with_its_version_and_offsets(client):
    store = RedisStatsStore(client, lineage=uuid.uuid4().hex, alpha=0.5)
    counts = KeyCounts(np.array([1]), np.array([4.0]), np.array([pack_pair(1, 2)]), np.array([2.0]))
    assert store.apply_step(counts, step=1, version=3, offsets={0: 17, 3: 2}, bytes_per_token=3.25)
    assert not store.apply_step(counts, step=1, version=3, offsets={0: 17, 3: 2})  # a replay: nothing
    assert store.token(np.array([1])).tolist() == [2.0] and store.step == 1
    assert store.meta() == {
        "step": 1,
        "version": 3,
        "offsets": {0: 17, 3: 2},
        "revised": 0,
        "bytes_per_token": 3.25,
        "documents": 0,
    }
    with pytest.raises(redis.ResponseError, match="step 3 would skip step 2"):
        store.apply_step(counts, step=3)
    assert store.step == 1


def test_a_lineage_keeps_one_alpha_and_one_slot(client):
    lineage = uuid.uuid4().hex
    store = RedisStatsStore(client, lineage=lineage, alpha=0.5)
    assert all(f"{{{lineage}}}" in key for key in store.keys)  # the hash tag: one Cluster slot
    with pytest.raises(ValueError, match="alpha 0.5, not 0.25"):
        RedisStatsStore(client, lineage=lineage, alpha=0.25)


def test_statistics_of_the_earlier_layout_are_refused_with_what_to_do(client):
    lineage = uuid.uuid4().hex
    client.hset(f"tokmaint:{{{lineage}}}:meta", mapping={"alpha": "0.5", "scale": "0.25", "step": "2"})
    with pytest.raises(TokmaintError, match=r"earlier layout.*delete the keys tokmaint:\{" + lineage):
        RedisStatsStore.open(client, lineage=lineage)


def test_a_revision_bounds_the_pair_table_keeping_the_strongest(client):
    store = RedisStatsStore(client, lineage=uuid.uuid4().hex, alpha=0.5)
    keys = np.array([pack_pair(1, k) for k in range(10)])
    store.apply_counts(KeyCounts(np.array([], np.int64), np.array([]), keys, np.arange(1.0, 11.0)))
    assert store.write_revision(StatsEdit(), step=1, pending=b"", max_pairs=3) and store.tracked_pairs == 3
    assert store.top_pairs(5)[0].tolist() == [pack_pair(1, 9), pack_pair(1, 8), pack_pair(1, 7)]


def test_a_revision_is_applied_once_and_kept_until_settled(client):
    store = RedisStatsStore(client, lineage=uuid.uuid4().hex, alpha=0.5)
    store.apply_counts(KeyCounts(np.array([1, 2]), np.array([4.0, 6.0]), np.array([pack_pair(1, 2)]), np.array([8.0])))
    edit = StatsEdit(adds=[(3, 1, 2)])
    assert store.write_revision(edit, step=1, pending=b"version 2")
    assert not store.write_revision(edit, step=1, pending=b"version 2")  # a replay: nothing
    assert store.token(np.array([3])).tolist() == [4.0] and store.tracked_pairs == 0
    assert store.pending() == b"version 2" and store.meta()["revised"] == 1
    store.settle(2)
    assert store.pending() is None and store.meta()["version"] == 2


def test_steps_written_together_equal_steps_one_by_one(client):
    """Spans of steps combined into one write (across a renormalisation: α = 0.6 for 300 steps)
    leave the statistics of the steps written one by one."""
    rng = np.random.default_rng(3)
    memory, stored = MemoryStatsStore(alpha=0.6), RedisStatsStore(client, lineage=uuid.uuid4().hex, alpha=0.6)
    step = 0
    while step < 300:
        span = [_counts(rng, 40) for _ in range(rng.integers(1, 9))]
        for counts in span:
            memory.apply_counts(counts)
        step += len(span)
        assert stored.apply_step(combine_steps(span, alpha=0.6), step=step, span=len(span))
    ids = np.arange(40)
    assert stored.step == memory.step == step
    np.testing.assert_allclose(stored.token(ids), memory.token(ids), rtol=1e-9, atol=1e-300)
    keys = memory.top_pairs(memory.tracked_pairs)[0]
    np.testing.assert_allclose(stored.pair(keys), memory.pair(keys), rtol=1e-9, atol=1e-300)
    assert 0.4**300 < RENORMALISE_BELOW  # so both renormalised on the way (at different steps)


def test_neighbour_segments_compact_to_the_same_ema_bounded_to_the_strongest(client):
    """Each write appends a segment; readers decay and sum them (an offline EMA by text, here),
    and compaction into one changes nothing but the bound: the strongest pairs stay."""
    rng = np.random.default_rng(5)
    texts = np.array([f"t{i}" for i in range(30)], dtype=object)
    store = RedisStatsStore(client, lineage=uuid.uuid4().hex, alpha=0.3)
    ema: dict[tuple[str, str], float] = {}
    for step in range(1, 13):
        keys = np.unique(pack_pair(rng.integers(0, 30, 20), rng.integers(0, 30, 20)))
        counts = rng.integers(1, 5, len(keys)).astype(float)
        ema = {k: 0.7 * v for k, v in ema.items()}
        for k, c in zip(keys.tolist(), counts.tolist()):
            pair = (texts[k >> 32], texts[k & 0xFFFFFFFF])
            ema[pair] = ema.get(pair, 0.0) + 0.3 * c
        store.apply_step(
            KeyCounts(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64), np.zeros(0)),
            step=step,
            neighbour_keys=keys,
            neighbour_counts=counts,
            token_texts=texts,
        )
    assert store.neighbour_segments() == 12

    def check(stored):
        assert stored.keys() <= ema.keys()
        np.testing.assert_allclose([stored[k] for k in stored], [ema[k] for k in stored], rtol=1e-12)

    check(store.neighbours())
    assert store.neighbours().keys() == ema.keys()
    assert store.compact_neighbours() and store.neighbour_segments() == 1
    check(store.neighbours())
    assert store.compact_neighbours(max_pairs=10) and len(store.neighbours()) == 10
    check(store.neighbours())
    assert min(store.neighbours().values()) >= sorted(ema.values())[-10]


def test_lineages_shard_over_the_cluster_nodes(redis_cluster):
    client = connect_redis(redis_cluster)
    assert isinstance(client, redis.RedisCluster) and len(client.get_primaries()) == 3
    nodes = {}  # a lineage for each node: its keys' slot is there
    while len(nodes) < 3:
        lineage = uuid.uuid4().hex[:8]
        nodes.setdefault(client.get_node_from_key(f"tokmaint:{{{lineage}}}:meta").name, lineage)
    rng = np.random.default_rng(3)
    for lineage in nodes.values():
        store = RedisStatsStore(client, lineage=lineage, alpha=0.2)
        store.apply_step(_counts(rng, 20), step=1, version=1, offsets={"docs:0": 5})
        store.write_revision(StatsEdit(), step=1, pending=b"version 2")
    ours = {f"{{{lineage}}}" for lineage in nodes.values()}
    for name, lineage in nodes.items():  # each node holds the keys of its lineage, of no other
        keys = {k.decode() for k in client.get_node(node_name=name).redis_connection.keys("tokmaint:*")}
        assert {k.split(":")[1] for k in keys} & ours == {f"{{{lineage}}}"}
        assert RedisStatsStore.open(client, lineage=lineage).pending() == b"version 2"
