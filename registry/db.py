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
    """Bring the database at ``url`` to the newest schema (creating it from empty)."""
    command.upgrade(alembic_config(url), "head")
