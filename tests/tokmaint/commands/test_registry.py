"""``tokmaint registry create`` against a real registry server: from a tokenizer.json, or trained
on a corpus's oldest documents; ``--exist-ok`` makes a second run a no-op (what an init container
runs at every start)."""

import json
import sqlite3
import uuid

import pytest

from registry.client import RegistryClient
from tests.conftest import REGISTRY_TOKEN as TOKEN
from tokenizer_service.corpus import read_corpus
from tokmaint.cli import main


@pytest.fixture(scope="module")
def registry(registry_server):
    return registry_server[0]


def test_create_trains_on_the_oldest_documents_and_exist_ok_keeps_it(registry, drifting_corpus, monkeypatch, capsys):
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", TOKEN)
    name = f"cli-{uuid.uuid4().hex[:8]}"
    argv = [
        "registry",
        "create",
        name,
        "--registry",
        registry,
        "--train",
        str(drifting_corpus),
        "--train-docs",
        "50",
        "--vocab-size",
        "300",
        "--json",
    ]
    assert main(argv) == 0
    created = json.loads(capsys.readouterr().out)
    assert (created["number"], created["kind"], created["vocab_size"]) == (1, "initial", 300)
    tokenizer = RegistryClient(registry).tokenizer(name, 1)
    oldest = read_corpus(drifting_corpus).texts[:50]
    assert tokenizer.encode(oldest[0]) and tokenizer.decode(tokenizer.encode(oldest[0])) == oldest[0]

    assert main(argv[:-1] + ["--vocab-size", "400", "--exist-ok", "--json"]) == 0  # kept, not replaced
    assert json.loads(capsys.readouterr().out)["sha256"] == created["sha256"]
    assert main(argv) != 0  # without --exist-ok: refused, and said why
    assert "lineage_exists" in capsys.readouterr().err


def test_create_takes_one_source(registry, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["registry", "create", "x", "--registry", registry])
    assert exc.value.code == 2 and "one of a tokenizer.json or --train CORPUS" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["sentencepiece", "nfc"])
def test_create_from_a_tokenizer_of_another_family(
    registry, byte_tokenizer, sp_tokenizer, family, monkeypatch, capsys, tmp_path
):
    """A SentencePiece-style tokenizer with byte fallback, and a byte-level one with an NFC
    normalizer: the registry's own checks take both as version 1, unchanged."""
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", TOKEN)
    tokenizer = sp_tokenizer
    if family == "nfc":
        data = json.loads(byte_tokenizer.to_json())
        data["normalizer"] = {"type": "NFC"}
        tokenizer = type(byte_tokenizer).from_json(json.dumps(data))
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    name = f"cli-{family}-{uuid.uuid4().hex[:6]}"
    assert main(["registry", "create", name, str(path), "--registry", registry, "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert (created["number"], created["sha256"]) == (1, tokenizer.sha256)
    assert RegistryClient(registry).tokenizer(name, 1).vocab == tokenizer.vocab


def test_migrate_makes_a_fresh_folder_and_a_relay_waits_for_the_schema(broker, tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'fresh' / 'registry.db'}"
    relay = [
        "registry",
        "relay",
        "--db",
        db,
        "--artifacts",
        str(tmp_path / "artifacts"),
        "--bootstrap",
        broker,
        "--once",
        "--json",
    ]
    assert main([*relay, "--wait", "0.5"]) == 2  # started before the server made the database
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.endswith("does not open (unable to open database file))")
    (tmp_path / "fresh").mkdir()
    sqlite3.connect(tmp_path / "fresh" / "registry.db").close()  # a database, no schema in it
    assert main([*relay, "--wait", "0"]) == 2
    assert "has no schema yet: start `tokmaint registry serve`" in capsys.readouterr().err
    (tmp_path / "fresh").rename(tmp_path / "empty")
    assert main(["registry", "migrate", "--db", db, "--json"]) == 0
    assert (tmp_path / "fresh" / "registry.db").is_file()
    capsys.readouterr()
    assert main([*relay, "--wait", "0"]) == 0 and json.loads(capsys.readouterr().out) == {"sent": 0}


def test_alias_refuses_a_name_the_hub_reads_as_a_version_and_says_why(
    registry, byte_tokenizer, monkeypatch, capsys, tmp_path
):
    monkeypatch.setenv("TOKMAINT_REGISTRY_TOKEN", TOKEN)
    name = f"cli-alias-{uuid.uuid4().hex[:6]}"
    byte_tokenizer.save(tmp_path / "tokenizer.json")
    assert main(["registry", "create", name, str(tmp_path / "tokenizer.json"), "--registry", registry]) == 0
    capsys.readouterr()
    for alias in ("main", "v2", "v0", "12", "ab" * 20):
        assert main(["registry", "alias", name, alias, "1", "--registry", registry]) == 2
        error = capsys.readouterr().err.strip()
        assert error.endswith(
            f"registry answered 422 invalid_name: alias {alias!r} would shadow a version "
            "reference: "
            + (
                "'main' names the newest version"
                if alias == "main"
                else "40 hex characters name a commit (the Hub's)"
                if len(alias) == 40
                else "a number, or v and a number, names a version"
            )
        ), error
        assert "\n" not in error
    assert main(["registry", "alias", name, "serving", "1", "--registry", registry, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 1


@pytest.mark.parametrize("minutes", ["-1", "-0.5", "nan", "inf", "-inf", "1e400", "soon"])
def test_gc_refuses_an_age_that_is_not_a_finite_number_of_minutes(minutes, tmp_path, capsys):
    """Negative, nan and inf were taken (-1 or nan removed every unnamed artifact at once)."""
    db = f"sqlite:///{tmp_path / 'registry.db'}"
    assert main(["registry", "migrate", "--db", db]) == 0
    orphan = tmp_path / "artifacts" / "ab" / ("cd" * 31)
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"left by a refused publish")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "registry",
                "gc",
                "--db",
                db,
                "--artifacts",
                str(tmp_path / "artifacts"),
                f"--older-than-minutes={minutes}",
            ]
        )
    error = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and "\n" not in error
    assert f"argument --older-than-minutes: must be a number ≥ 0, got {minutes!r}" in error
    assert orphan.exists()


def test_gc_refuses_a_database_of_an_older_schema(tmp_path, capsys):
    """A server of a release before pins publishes without pinning: gc says so instead of
    collecting beside it (or failing on the missing table)."""
    from alembic import command

    from registry.db import alembic_config

    db = f"sqlite:///{tmp_path / 'registry.db'}"
    command.upgrade(alembic_config(db), "0003")
    gc = ["registry", "gc", "--db", db, "--artifacts", str(tmp_path / "artifacts"), "--json"]
    assert main(gc) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "is at schema 0003, not 0006: run `tokmaint registry migrate` "
            "(or start the server of this release: it migrates the database)"
        )
    )
    assert main(["registry", "migrate", "--db", db]) == 0 and main(gc) == 0


@pytest.mark.parametrize(
    "stamp, said",
    [
        (b"[2]", "is not a JSON object"),
        (b'"v2"', "is not a JSON object"),
        (b"{not json", "is not JSON"),
        (b'{"version": "two"}', "names no version"),
    ],
)
def test_publish_model_with_a_stamp_that_names_no_version_is_one_line(registry, tmp_path, stamp, said, capsys):
    """A model folder whose tokmaint.json names no version (not an object, not JSON, no number)
    is one line and exit 2, never a traceback, and nothing is sent."""
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokmaint.json").write_bytes(stamp)
    assert main(["registry", "publish-model", "anything", "--model", str(tmp_path), "--registry", registry]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and said in err and "Traceback" not in err and "give --version" in err
