"""Database engines and migrations: SQLite (a file, embedded) by default, PostgreSQL by URL.

SQLite serialises writers with ``BEGIN IMMEDIATE`` (so two processes publishing to one lineage
never both read the same latest number) and uses WAL, so readers never wait for a writer.
PostgreSQL locks the lineage row instead (``store.py``). ``migrate`` runs Alembic's
``upgrade head``; the server runs it at start.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import OperationalError

MIGRATIONS = Path(__file__).with_name("migrations")


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and immediate write transactions."""
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    engine = create_engine(url, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        # Let SQLAlchemy's "begin" below open the transaction, not the driver.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def migrate(url: str) -> None:
    """Bring the database at ``url`` to the newest schema (creating it from empty; an SQLite
    file's folder too)."""
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(url), "head")


def check_schema(engine: Engine, url: str) -> None:
    """Raise LookupError unless the database is at the newest schema (what ``migrate`` and the
    server at its start make): a relay or a gc started before the server has nothing to read."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    try:
        with engine.connect() as connection:
            current = set(MigrationContext.configure(connection).get_current_heads())
    except OperationalError as exc:  # no file (or folder) yet; a database server not up yet
        raise LookupError(f"the registry's database does not open ({exc.orig})") from None
    heads = set(ScriptDirectory.from_config(alembic_config(url)).get_heads())
    if not current:
        raise LookupError(
            "the registry's database has no schema yet: start `tokmaint registry serve` "
            "(it migrates the database) or run `tokmaint registry migrate`"
        )
    if current != heads:
        raise LookupError(
            f"the registry's database is at schema {', '.join(sorted(current))}, not "
            f"{', '.join(sorted(heads))}: run `tokmaint registry migrate` (or start the server of this "
            "release: it migrates the database)"
        )
