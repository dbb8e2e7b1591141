"""The registry store on SQLite and on PostgreSQL (a fresh database per test session on the
session's server, ``tests.servers``): migrations, publishing a real Ted-Tok lineage, refusals
that store nothing, aliases, rollback, composed diffs, the outbox, and several processes
publishing to one lineage at once."""

import json
import multiprocessing
import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest
from alembic import command
from sqlalchemy import inspect, select
from sqlalchemy.orm import Session

from registry.api.routes.hub import model_commit
from registry.artifacts import LocalArtifactStore, artifact_name
from registry.client import RegistryClient
from registry.db import alembic_config, make_engine, migrate
from registry.local_server import start_server
from registry.models import Alias, Diff, Lineage, PendingArtifact, utcnow
from registry.store import PIN_EXPIRY_SECONDS, Registry, RegistryError
from schemas.revision import RevisionDiff
from tests.conftest import sentences, tedtok_lineage
from tests.support.registry_files import (
    collect_until_stopped,
    exported_model,
    lying_diff,
    model_variant,
    moved_ids,
    unreachable_add,
    variant,
)
from tests.support.registry_server import TOKEN
from tokenizer_service.bpe import BPETokenizer


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    """An empty database per test: a SQLite file, or a schema-reset PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'registry.db'}"
    url = request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    engine.dispose()
    return url


@pytest.fixture
def registry(database_url, tmp_path):
    migrate(database_url)
    return Registry(make_engine(database_url), LocalArtifactStore(tmp_path / "artifacts"))


@pytest.fixture(scope="module")
def lineage():
    """An initial tokenizer and the revisions Ted-Tok made of it over a drifting stream."""
    initial, revisions = tedtok_lineage(seed=100, steps=24)
    assert len(revisions) >= 8
    return initial, revisions


def publish_lineage(registry, lineage):
    initial, revisions = lineage
    registry.create_lineage("demo", initial.to_json().encode())
    return [
        registry.publish("demo", r.tokenizer.to_json().encode(), diff_json=r.diff.to_json().encode()) for r in revisions
    ]


def test_migrations_create_every_table(database_url):
    migrate(database_url)
    migrate(database_url)  # already at head: nothing to do
    tables = set(inspect(make_engine(database_url)).get_table_names())
    assert {
        "lineages",
        "versions",
        "diffs",
        "aliases",
        "models",
        "outbox",
        "pending_artifacts",
        "alembic_version",
    } <= tables


def test_a_tedtok_lineage_is_published_gapless_with_its_diffs(registry, lineage):
    initial, revisions = lineage
    published = publish_lineage(registry, lineage)
    assert [v.number for v in published] == list(range(2, len(revisions) + 2))
    assert [v.parent for v in published] == list(range(1, len(revisions) + 1))
    for info, revision in zip(published, revisions):
        assert info.sha256 == revision.tokenizer.sha256 and info.id_space == revision.tokenizer.id_space
        assert registry.diff("demo", info.number).entries == revision.diff.entries
        assert registry.tokenizer("demo", info.number).to_json() == revision.tokenizer.to_json()
    page, total = registry.versions("demo", offset=2, limit=3)
    assert [v.number for v in page] == [3, 4, 5] and total == len(revisions) + 1
    assert registry.lineages() == [("demo", len(revisions) + 1)]


def test_republishing_the_latest_content_returns_it(registry, lineage):
    published = publish_lineage(registry, lineage)
    again = registry.publish("demo", lineage[1][-1].tokenizer.to_json().encode())
    assert again == published[-1] and registry.count_versions() == len(published) + 1


def test_a_publish_without_a_diff_gets_the_one_the_registry_computes(registry, lineage):
    initial, revisions = lineage
    registry.create_lineage("demo", initial.to_json().encode(), kind="import")
    info = registry.publish("demo", revisions[0].tokenizer.to_json().encode(), kind="import")
    assert registry.diff("demo", info.number).entries == revisions[0].diff.entries


def test_composed_diff_equals_applying_every_diff_in_turn(registry, lineage):
    published = publish_lineage(registry, lineage)
    start, end = 2, published[-1].number
    tokens = dict(registry.tokenizer("demo", start).id_to_token)
    for n in range(start + 1, end + 1):
        for e in registry.diff("demo", n).entries:
            tokens.pop(e.id, None) if e.new_token is None else tokens.__setitem__(e.id, e.new_token)
    composed = dict(registry.tokenizer("demo", start).id_to_token)
    for e in registry.composed_diff("demo", start, end).entries:
        composed.pop(e.id, None) if e.new_token is None else composed.__setitem__(e.id, e.new_token)
    assert tokens == composed == registry.tokenizer("demo", end).id_to_token
    with Session(registry.engine) as session:  # kept once computed, and served from the table after
        kept = session.scalars(select(Diff).where(Diff.from_number == start, Diff.to_number == end)).one()
    assert registry.composed_diff("demo", start, end) == RevisionDiff.from_dict(
        json.loads(registry.artifacts.get(kept.sha256))
    )


def test_the_diffs_migration_fills_in_every_version_s_own_diff(database_url, registry, lineage):
    published = publish_lineage(registry, lineage)
    own = {(v.parent, v.number): v.diff_sha256 for v in [registry.version("demo", 1), *published]}
    config = alembic_config(database_url)
    command.downgrade(config, "0001")  # a registry made before the diffs table
    assert "diffs" not in inspect(make_engine(database_url)).get_table_names()
    command.upgrade(config, "head")
    with Session(registry.engine) as session:
        rows = {(d.from_number, d.to_number): d.sha256 for d in session.scalars(select(Diff))}
    assert rows == own and len(own) == len(published) + 1


def test_aliases_and_rollback(registry, lineage):
    published = publish_lineage(registry, lineage)
    assert registry.set_alias("demo", "serving", 3) == 3
    assert registry.version("demo", "serving").number == 3
    registry.set_alias("demo", "serving", "latest")
    assert registry.version("demo", "serving").number == published[-1].number
    rolled = registry.rollback("demo", 3)
    assert rolled.number == published[-1].number + 1 and rolled.kind == "rollback"
    assert rolled.sha256 == registry.version("demo", 3).sha256
    assert registry.composed_diff("demo", 3, rolled.number).entries == []
    registry.delete_alias("demo", "serving")
    with pytest.raises(RegistryError) as caught:
        registry.version("demo", "serving")
    assert caught.value.status == 404
    with pytest.raises(RegistryError, match="shadow"):
        registry.set_alias("demo", "latest", 2)


def _store_aliases(registry, names: dict[str, int]) -> None:
    """Aliases as a registry older than the alias-name rule stored them (not checked)."""
    with Session(registry.engine) as session:
        lineage_id = session.scalars(select(Lineage.id).where(Lineage.name == "demo")).one()
        session.add_all(Alias(lineage_id=lineage_id, name=name, number=number) for name, number in names.items())
        session.commit()


def test_a_name_the_hub_reads_as_a_version_is_resolved_so_never_as_an_old_alias(registry, lineage):
    """Aliases stored before the rule (``main``, ``v1``, a commit's 40 hex characters) are read
    as the Hub reads those names: the newest version, version 1, no version here; never as the
    alias of that name."""
    published = publish_lineage(registry, lineage)
    _store_aliases(registry, {"main": 1, "v1": 3, "V2": 4, "ab" * 20: 2})
    assert registry.version("demo", "main").number == published[-1].number
    assert registry.resolve("demo", "v1") == 1 and registry.resolve("demo", "V2") == 2
    with pytest.raises(RegistryError) as caught:
        registry.resolve("demo", "ab" * 20)
    assert caught.value.code == "version_not_found" and "commit" in caught.value.reasons[0]


def test_migrating_renames_old_aliases_that_shadow_a_version_and_keeps_them_readable(
    database_url, registry, lineage, caplog
):
    """A database at schema 0004 holding aliases the Hub reads as versions: migrating renames
    each to ``alias-NAME`` (``-2`` where that is taken), pointing where it pointed, logs each,
    and leaves every other alias as it was."""
    publish_lineage(registry, lineage)
    config = alembic_config(database_url)
    command.downgrade(config, "0004")
    _store_aliases(registry, {"main": 1, "v1": 3, "ab" * 20: 2, "alias-main": 4, "serving": 5})
    with caplog.at_level("WARNING", logger="tokmaint.migrations"):
        command.upgrade(config, "head")
    assert registry.aliases("demo") == {
        "alias-main": 4,
        "alias-main-2": 1,
        "alias-v1": 3,
        f"alias-{'ab' * 20}": 2,
        "serving": 5,
    }
    assert registry.resolve("demo", "alias-main-2") == 1
    renamed = [r.getMessage() for r in caplog.records if r.name == "tokmaint.migrations"]
    assert len(renamed) == 3 and any("lineage 'demo': alias 'main' is now 'alias-main-2'" in r for r in renamed)


def test_migrating_renames_old_aliases_that_differ_from_a_reference_only_in_case(
    database_url, registry, lineage, caplog
):
    """Aliases stored before names were case-exact (``MAIN`` naming version 1 while ``main`` named
    the newest, ``HEAD``, ``head``): migrating renames each to ``alias-NAME``, pointing where it
    pointed; the old names then read as no version, with the reason."""
    published = publish_lineage(registry, lineage)
    config = alembic_config(database_url)
    command.downgrade(config, "0005")
    _store_aliases(registry, {"MAIN": 1, "HEAD": 2, "head": 3, "Mainline": 4})
    with caplog.at_level("WARNING", logger="tokmaint.migrations"):
        command.upgrade(config, "head")
    assert registry.aliases("demo") == {"Mainline": 4, "alias-HEAD": 2, "alias-MAIN": 1, "alias-head": 3}
    renamed = [r.getMessage() for r in caplog.records if r.name == "tokmaint.migrations"]
    assert len(renamed) == 3 and any("lineage 'demo': alias 'MAIN' is now 'alias-MAIN'" in r for r in renamed)
    assert registry.resolve("demo", "main") == published[-1].number
    with pytest.raises(RegistryError) as caught:
        registry.resolve("demo", "MAIN")
    assert caught.value.code == "version_not_found" and "names are case-exact" in caught.value.reasons[0]


def test_every_publish_writes_one_event(registry, lineage):
    published = publish_lineage(registry, lineage)
    events = registry.pending_events(limit=1000)
    assert [e["version"] for _, e in events] == list(range(1, published[-1].number + 1))
    assert len({e["event_id"] for _, e in events}) == len(events)
    registry.mark_sent([i for i, _ in events[:3]])
    assert [e["version"] for _, e in registry.pending_events()][0] == 4


REFUSALS = [
    ("truncated JSON", lambda r: (r.tokenizer.to_json().encode()[:-20], None), 422, "not JSON"),
    (
        "not BPE",
        lambda r: (json.dumps({"model": {"type": "WordPiece", "vocab": {}, "merges": []}}).encode(), None),
        422,
        "tokmaint maintains BPE tokenizers only",
    ),
    (
        "a diff that lies",
        lambda r: (r.tokenizer.to_json().encode(), lying_diff(r.diff.to_json().encode())),
        409,
        "the diff does not match the tokenizers",
    ),
    ("surviving tokens moved", lambda r: (moved_ids(r.tokenizer), None), 409, "surviving tokens changed their id"),
    ("unreachable added token", lambda r: (unreachable_add(r.tokenizer), None), 422, "added tokens are unreachable"),
    ("not a diff", lambda r: (r.tokenizer.to_json().encode(), b'{"entries": 3}'), 422, "not a revision diff"),
    (
        "only the pre-tokenizer changed",
        lambda r: (_other_pre_tokenizer(r.tokenizer), None),
        409,
        "the pipeline changed (pre_tokenizer)",
    ),
]


def _other_pre_tokenizer(tokenizer: BPETokenizer) -> bytes:
    """The same vocabulary and merges, words split another way: an empty diff of ids."""
    data = json.loads(tokenizer.to_json())
    data["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [{"type": "Digits", "individual_digits": True}, data["pre_tokenizer"]],
    }
    return json.dumps(data).encode()


@pytest.mark.parametrize("case, make, status, reason", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_refusals_give_every_reason_and_store_nothing(registry, lineage, tmp_path, case, make, status, reason):
    initial, revisions = lineage
    registry.create_lineage("demo", initial.to_json().encode())
    stored = sorted((tmp_path / "artifacts").rglob("*"))
    tokenizer_json, diff_json = make(revisions[0])
    with pytest.raises(RegistryError) as caught:
        registry.publish("demo", tokenizer_json, diff_json=diff_json)
    assert caught.value.status == status and any(reason in r for r in caught.value.reasons), caught.value.reasons
    assert registry.count_versions() == 1 and registry.version("demo").number == 1
    assert sorted((tmp_path / "artifacts").rglob("*")) == stored
    assert len(registry.pending_events()) == 1


def test_names_stale_parents_and_duplicates_are_refused(registry, lineage):
    initial, revisions = lineage
    with pytest.raises(RegistryError) as caught:
        registry.create_lineage("../etc", initial.to_json().encode())
    assert caught.value.status == 422
    registry.create_lineage("demo", initial.to_json().encode())
    with pytest.raises(RegistryError, match="exists already"):
        registry.create_lineage("demo", initial.to_json().encode())
    registry.publish("demo", revisions[0].tokenizer.to_json().encode())
    with pytest.raises(RegistryError, match="parent 1 is not the latest version") as caught:
        registry.publish("demo", revisions[1].tokenizer.to_json().encode(), parent=1)
    assert caught.value.status == 409
    with pytest.raises(RegistryError) as caught:
        registry.version("nope")
    assert caught.value.status == 404


def _publish_variants(url: str, artifacts: str, base_json: str, ks: list[int]) -> list[int]:
    registry = Registry(make_engine(url), LocalArtifactStore(artifacts))
    base = BPETokenizer.from_json(base_json)
    return [registry.publish("demo", variant(base, k), kind="import").number for k in ks]


def test_processes_publishing_at_once_get_gapless_unique_numbers(registry, database_url, tmp_path):
    base = BPETokenizer.train(["zz yy xx " * 3] + sentences(100), vocab_size=300)
    taken = {t for t in base.vocab if len(t) == 2}
    ks = [
        k
        for k in range(26 * 26)
        if "abcdefghijklmnopqrstuvwxyz"[k // 26] + "abcdefghijklmnopqrstuvwxyz"[k % 26] not in taken
    ][:18]
    registry.create_lineage("demo", base.to_json().encode())
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        results = pool.starmap(
            _publish_variants, [(database_url, str(tmp_path / "artifacts"), base.to_json(), ks[i::3]) for i in range(3)]
        )
    numbers = sorted(n for part in results for n in part)
    assert numbers == list(range(2, 2 + len(ks)))
    versions, latest = registry.versions("demo", limit=1000)
    assert [v.number for v in versions] == list(range(1, latest + 1)) and latest == len(ks) + 1
    assert [v.parent for v in versions[1:]] == list(range(1, latest))


def test_garbage_collection_removes_old_unnamed_artifacts_only(registry, lineage, database_url, tmp_path, capsys):
    """A refused or killed publish leaves artifacts no version names; collection removes those put
    long enough ago, never one a version (or a kept composed diff) names, nor a young one."""
    from tokmaint.cli import main

    infos = publish_lineage(registry, lineage)[:3]
    registry.composed_diff("demo", 1, 3)  # kept in the diffs table: named too
    old_orphan, young_orphan = (
        registry.artifacts.put(b'{"left": "by a refused publish"}'),
        registry.artifacts.put(b'{"left": "just now"}'),
    )
    long_ago = time.time() - 7200
    for path in (tmp_path / "artifacts").glob("??/*"):  # all of them old but the young orphan
        os.utime(path, (long_ago, long_ago))
    os.utime(registry.artifacts.path(young_orphan))
    dry = registry.collect_garbage(older_than=3600, dry_run=True)
    assert dry["artifacts"] == [old_orphan] and registry.artifacts.exists(old_orphan)
    argv = ["registry", "gc", "--db", database_url, "--artifacts", str(tmp_path / "artifacts"), "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["artifacts"] == [old_orphan]
    assert not registry.artifacts.exists(old_orphan) and registry.artifacts.exists(young_orphan)
    for info in infos:
        assert registry.tokenizer("demo", info.number).sha256 == info.sha256
    assert registry.composed_diff("demo", 1, 3).version == 3


def test_the_latest_version_of_every_lineage_in_use_stays_parsed(database_url, tmp_path, lineage):
    """Publishes to five lineages in turn: each publish checks against its lineage's latest, held
    parsed (a cache of two versions in all parsed them again and again). The lineages share
    contents, so three versions are in use: all held."""
    migrate(database_url)
    registry = Registry(make_engine(database_url), LocalArtifactStore(tmp_path / "artifacts"))
    initial, revisions = lineage
    names = [f"many-{k}" for k in range(5)]
    for name in names:
        registry.create_lineage(name, initial.to_json().encode())
    for revision in revisions[:2]:
        for name in names:
            registry.publish(name, revision.tokenizer.to_json().encode())
    assert registry.cached_versions == 3
    small = Registry(make_engine(database_url), LocalArtifactStore(tmp_path / "artifacts"), cache_tokens=0)
    for number in (1, 2, 3):
        small.tokenizer(names[0], number)
    assert small.cached_versions == 2  # the floor, under a budget of no tokens


def test_models_are_numbered_per_lineage_checked_against_their_version_and_kept_by_gc(registry, lineage):
    published = publish_lineage(registry, lineage)
    newest = published[-1]  # its rows cover every version's ids: ids only grow
    folder = exported_model(registry.tokenizer("demo", 2), {"lineage": "demo", "version": 2}, rows=newest.id_space)
    first = registry.publish_model("demo", folder, version=2, created_by="test")
    better = exported_model(
        registry.tokenizer("demo", 2), {"lineage": "demo", "version": 2}, rows=newest.id_space, n_positions=32
    )
    second = registry.publish_model("demo", better, version="2")
    latest = registry.publish_model(
        "demo", {k: v for k, v in folder.items() if k not in ("tokenizer.json", "tokmaint.json")}
    )
    assert [(m.number, m.version) for m in registry.models("demo")] == [(1, 2), (2, 2), (3, newest.number)]
    assert [m.number for m in registry.models("demo", after=1)] == [2, 3]
    assert first.files["model.safetensors"]["size"] == len(folder["model.safetensors"]) and second.created_by == ""
    assert registry.artifacts.get(second.files["config.json"]["sha256"]) == better["config.json"] and latest.number == 3
    config = {"model_type": "gpt2", "vocab_size": 3, "n_positions": 8, "n_embd": 4, "n_layer": 1, "n_head": 2}
    with pytest.raises(RegistryError) as refused:
        registry.publish_model(
            "demo",
            {
                "config.json": json.dumps(config).encode(),
                "../x": b"",
                "tokenizer.json": registry.artifacts.get(registry.version("demo", 1).sha256),
            },
            version=2,
        )
    assert refused.value.code == "invalid_model" and len(refused.value.reasons) == 4  # name, rows, weights, version
    with pytest.raises(RegistryError) as refused:
        registry.publish_model("demo", folder, version=2, max_files=3)
    assert refused.value.reasons == [f"the folder has {len(folder)} files; a model folder holds at most 3"]
    assert len(registry.models("demo")) == 3
    swept = registry.collect_garbage(older_than=0)
    assert all(f["sha256"] not in swept["artifacts"] for m in registry.models("demo") for f in m.files.values())


def test_a_model_folder_holds_its_version_as_an_export_writes_it(registry, lineage):
    """A version uploaded as indented JSON keeps its bytes (and their sha256); an exported
    folder's tokenizer.json, written anew, is the same tokenizer and is taken."""
    initial, _ = lineage
    registry.create_lineage("pretty", json.dumps(json.loads(initial.to_json()), indent=2).encode())
    version = registry.version("pretty", 1)
    assert version.sha256 != initial.sha256
    folder = exported_model(initial, {"lineage": "pretty", "version": 1, "sha256": initial.sha256})
    assert folder["tokenizer.json"] == initial.to_json_bytes()
    assert registry.publish_model("pretty", folder, version=1).version == 1


def test_gc_racing_publishes_of_stored_blobs_never_removes_what_they_name(registry, lineage, database_url, tmp_path):
    """A collector (another process, ``older_than=0``) runs without pause while threads publish
    models and create lineages whose blobs are in the store already, unnamed: a publish then
    only refreshes a blob's age, and the collector used to delete it between its reading of the
    names and the publish's commit. Every version and model committed has all its artifacts."""
    initial, _ = lineage
    registry.create_lineage("demo", initial.to_json().encode())
    model = exported_model(initial, {"lineage": "demo", "version": 1})
    context = multiprocessing.get_context("spawn")
    started, stop, runs = context.Event(), context.Event(), context.Value("i", 0)
    collector = context.Process(
        target=collect_until_stopped, args=(database_url, str(tmp_path / "artifacts"), started, stop, runs)
    )
    collector.start()
    try:
        assert started.wait(120)
        with ThreadPoolExecutor(6) as threads:
            for round_ in range(25):
                folders = [model_variant(model, round_ * 5 + k) for k in range(5)]
                copy = initial.to_json().encode() + b" " * (round_ + 1)  # the same tokenizer, other bytes
                for data in [copy, *(data for folder in folders for data in folder.values())]:
                    registry.artifacts.put(data)  # stored already, named by nothing
                work = [threads.submit(registry.publish_model, "demo", folder, version=1) for folder in folders]
                work.append(threads.submit(registry.create_lineage, f"race-{round_}", copy))
                for done in work:
                    done.result()
    finally:
        stop.set()
        collector.join(60)
    assert collector.exitcode == 0 and runs.value > 1
    assert len(registry.models("demo")) == 125 and len(registry.lineages()) == 26
    for model in registry.models("demo"):
        for file in model.files.values():
            assert len(registry.artifacts.get(file["sha256"])) == file["size"]
    for name, _ in registry.lineages():
        version = registry.version(name, 1)
        assert registry.tokenizer(name, 1).sha256 == initial.sha256 and registry.diff(name, 1).version == 1
        assert registry.artifacts.exists(version.sha256) and registry.artifacts.exists(version.diff_sha256)


class VanishingStore(LocalArtifactStore):
    """A store from which the blobs named in ``vanish`` disappear just after they are put (as if
    removed by hand), that many times each."""

    def __init__(self, root, vanish: dict[str, int]) -> None:
        super().__init__(root)
        self.vanish = vanish

    def put(self, data: bytes) -> str:
        name = super().put(data)
        if self.vanish.get(name, 0) > 0:
            self.vanish[name] -= 1
            self.delete(name)
        return name


def test_a_commit_whose_artifact_vanished_stores_it_again_or_is_refused(registry, lineage, database_url, tmp_path):
    """A row never names a missing artifact: a publish whose blob is gone at its commit puts it
    again; one whose blob keeps vanishing is refused (503 ``artifacts_missing``), nothing
    published and no pin left."""
    initial, revisions = lineage
    registry.create_lineage("demo", initial.to_json().encode())
    model = exported_model(initial, {"lineage": "demo", "version": 1})
    data = revisions[0].tokenizer.to_json().encode()
    sha, weights = revisions[0].tokenizer.sha256, model["model.safetensors"]
    vanishing = Registry(registry.engine, VanishingStore(tmp_path / "artifacts", {sha: 1, artifact_name(weights): 1}))
    published = vanishing.publish("demo", data)
    published_model = vanishing.publish_model("demo", model, version=1)
    assert registry.artifacts.get(published.sha256) == data
    assert registry.artifacts.get(published_model.files["model.safetensors"]["sha256"]) == weights
    vanishing.artifacts.vanish = {revisions[1].tokenizer.sha256: 100}
    with pytest.raises(RegistryError) as refused:
        vanishing.publish("demo", revisions[1].tokenizer.to_json().encode())
    assert refused.value.status == 503 and refused.value.code == "artifacts_missing"
    assert "removed from the store" in refused.value.reasons[0]
    assert registry.version("demo").number == 2 and len(registry.pending_events(limit=100)) == 2
    with Session(registry.engine) as session:
        assert session.scalars(select(PendingArtifact)).all() == []


def test_gc_keeps_what_a_publish_under_way_pinned_and_clears_pins_a_killed_one_left(registry, lineage):
    """A pin (a publish under way, its blob put, its row not yet committed) keeps its artifact
    however old; a pin over ``PIN_EXPIRY_SECONDS`` old (its publish was killed) is cleared, and
    its artifact goes with the next collection. The age is a finite number of seconds ≥ 0."""
    initial, _ = lineage
    registry.create_lineage("demo", initial.to_json().encode())
    under_way, killed = registry.artifacts.put(b'{"a": "publish under way"}'), registry.artifacts.put(b'{"killed": 1}')
    with Session(registry.engine) as session, session.begin():
        session.add(PendingArtifact(sha256=under_way))
        session.add(PendingArtifact(sha256=killed, created_at=utcnow() - timedelta(seconds=PIN_EXPIRY_SECONDS + 60)))
    assert registry.collect_garbage(older_than=0, dry_run=True) == {
        "named": 3,
        "pinned": 1,
        "expired_pins": 1,
        "removed": 1,
        "dry_run": True,
        "artifacts": [killed],
    }
    refused = sorted(registry.artifacts.put(f'{{"refused": {k}}}'.encode()) for k in range(4))
    swept = registry.collect_garbage(older_than=0, batch=2)  # the lock taken three times, the names read anew
    assert (swept["artifacts"], swept["expired_pins"], swept["pinned"]) == (sorted([killed, *refused]), 1, 1)
    assert registry.artifacts.exists(under_way) and not registry.artifacts.exists(killed)
    assert registry.collect_garbage(older_than=0)["expired_pins"] == 0
    for older_than in (-1, float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError, match="finite number of seconds >= 0"):
            registry.collect_garbage(older_than=older_than)
    assert registry.artifacts.exists(under_way) and registry.tokenizer("demo", 1).sha256 == initial.sha256


def _config(folder: dict[str, bytes], **changes) -> dict[str, bytes]:
    """The folder with ``changes`` in its config.json (NaN written as Python writes it)."""
    return {**folder, "config.json": json.dumps({**json.loads(folder["config.json"]), **changes}).encode()}


def _index(folder: dict[str, bytes], shard: str) -> dict[str, bytes]:
    """The folder's weights as one shard named ``shard`` in model.safetensors.index.json."""
    from safetensors import safe_open
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".safetensors") as file:
        file.write(folder["model.safetensors"])
        file.flush()
        with safe_open(file.name, "np") as weights:
            names = list(weights.keys())
    rest = {k: v for k, v in folder.items() if k != "model.safetensors"}
    return {
        **rest,
        "model-00001-of-00001.safetensors": folder["model.safetensors"],
        "model.safetensors.index.json": json.dumps(
            {"metadata": {}, "weight_map": dict.fromkeys(names, shard)}
        ).encode(),
    }


@pytest.mark.parametrize(
    "case, change, reason",
    [
        (
            "random weights",
            lambda f, v3: {**f, "model.safetensors": os.urandom(4096)},
            "model.safetensors: no safetensors",
        ),
        (
            "empty weights",
            lambda f, v3: {**f, "model.safetensors": b""},
            "model.safetensors: no safetensors file: 0 bytes",
        ),
        (
            "weights of another size",
            lambda f, v3: {**f, "model.safetensors": v3["model.safetensors"]},
            "model.safetensors: wte.weight is [",
        ),
        (
            "shard outside the folder",
            lambda f, v3: _index(f, "../../../etc/passwd"),
            "model.safetensors.index.json: weight_map names '../../../etc/passwd'",
        ),
        ("a sharded model that loads", lambda f, v3: _index(f, "model-00001-of-00001.safetensors"), None),
        ("vocab_size 10^30", lambda f, v3: _config(f, vocab_size=10**30), "config.json: vocab_size must be an integer"),
        (
            "n_positions lots",
            lambda f, v3: _config(f, n_positions="lots"),
            "config.json: n_positions must be an integer",
        ),
        ("n_positions NaN", lambda f, v3: _config(f, n_positions=float("nan")), "config.json: not JSON: NaN"),
        ("heads that do not divide", lambda f, v3: _config(f, n_head=3), "config.json: n_head (3) must divide"),
        ("another model type", lambda f, v3: _config(f, model_type="bert"), "config.json: model_type must be gpt2"),
        (
            "a pickle",
            lambda f, v3: {
                **{k: v for k, v in f.items() if k != "model.safetensors"},
                "pytorch_model.bin": b"\x80\x04",
            },
            "pytorch_model.bin: a pickle",
        ),
        (
            "version 3's folder beside version 1",
            lambda f, v3: {k: v for k, v in v3.items() if k != "tokenizer.json"},
            "tokmaint.json: the model was trained with version 3, not version 1",
        ),
        (
            "a stamp that is not an object",
            lambda f, v3: {**f, "tokmaint.json": b"[1]"},
            "tokmaint.json: not a JSON object",
        ),
    ],
)
def test_a_model_that_would_not_load_as_served_is_refused_naming_its_file_and_field(
    registry, lineage, case, change, reason
):
    """A folder the registry would serve but transformers could not load as published (or would
    load beside another version) is refused with a reason naming the file and the field, and
    nothing is published; the same folder exported whole is taken."""
    publish_lineage(registry, lineage)
    v1 = registry.tokenizer("demo", 1)
    folder = exported_model(v1, {"lineage": "demo", "version": 1}, rows=registry.version("demo", 3).id_space)
    v3 = exported_model(
        registry.tokenizer("demo", 3), {"lineage": "demo", "version": 3}, rows=registry.version("demo", 3).id_space + 7
    )
    if reason is None:
        assert registry.publish_model("demo", change(folder, v3), version=1).number == 1
        return
    with pytest.raises(RegistryError) as refused:
        registry.publish_model("demo", change(folder, v3), version=1)
    assert refused.value.code == "invalid_model" and refused.value.status == 422
    assert any(r.startswith(reason) for r in refused.value.reasons), refused.value.reasons
    assert registry.models("demo") == []
    assert registry.publish_model("demo", folder, version=1).number == 1


def test_gc_beside_the_server_never_takes_a_model_s_files_from_the_hub(revisions, tmp_path):
    """A collector with no age limit (``registry gc --older-than-minutes 0``, over and over in a
    process of its own) beside a server taking model uploads whose files the store holds
    already, unnamed: every model the server committed serves every file over the Hub (the
    collector deleted some between its reading of the names and the commit, and the Hub
    answered 500, ``KeyError: no artifact``)."""
    initial, _ = revisions
    root = tmp_path / "registry"
    process, url = start_server(root, env={"TOKMAINT_REGISTRY_TOKEN": TOKEN})
    context = multiprocessing.get_context("spawn")
    started, stop, runs = context.Event(), context.Event(), context.Value("i", 0)
    collector = context.Process(
        target=collect_until_stopped,
        args=(f"sqlite:///{root / 'registry.db'}", str(root / "artifacts"), started, stop, runs),
    )
    try:
        RegistryClient(url, token=TOKEN).create("raced", initial.to_json())
        exported = exported_model(initial, {"lineage": "raced", "version": 1})
        store = LocalArtifactStore(root / "artifacts")
        folders = []
        for k in range(48):
            folder = tmp_path / f"model-{k}"
            folder.mkdir()
            for name, data in model_variant(exported, k).items():
                (folder / name).write_bytes(data)
                store.put(data)  # stored already, named by nothing
            folders.append(folder)
        collector.start()
        assert started.wait(120)

        def upload(folder):
            with RegistryClient(url, token=TOKEN) as client:
                return client.publish_model("raced", folder, version=1)

        with ThreadPoolExecutor(4) as threads:
            published = list(threads.map(upload, folders))
    finally:
        stop.set()
        collector.join(60)
    try:
        assert collector.exitcode == 0 and runs.value > 1
        for model, folder in zip(published, folders):
            commit = model_commit(model)
            for name in exported:
                response = httpx.get(f"{url}/raced-models/resolve/{commit}/{name}")
                assert response.status_code == 200, (model.number, name, response.text)
                assert response.content == (folder / name).read_bytes()
    finally:
        process.terminate()
        process.wait(timeout=30)
