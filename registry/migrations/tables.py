"""The pieces the registry's migrations build their tables from: every table starts with an integer
``id``, its primary key (``pk_TABLE``); the rows of a lineage follow it with ``lineage_id``, a
foreign key to ``lineages.id``; most rows say when (and by whom) they were written.

The migrations that call these have run on users' databases, so what each one creates stays as it
is: a later migration that wants another shape spells its table out. The constraints are named as
``registry.models``' naming convention names them, and made in the order the first migrations made
them (SQLite keeps each CREATE TABLE as it was written, its constraints in that order).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.schema import SchemaItem


def created_at_column() -> sa.Column[datetime]:
    """When the row was written (with its time zone).

    >>> created_at_column()
    Column('created_at', DateTime(timezone=True), table=None, nullable=False)
    """
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False)


def created_by_column() -> sa.Column[str]:
    """Who wrote the row.

    >>> created_by_column()
    Column('created_by', String(length=128), table=None, nullable=False)
    """
    return sa.Column("created_by", sa.String(length=128), nullable=False)


def create_table(name: str, *items: SchemaItem) -> None:
    """``op.create_table`` with the integer ``id`` first and the primary key ``pk_NAME`` on it.

    ``create_table("pins", sa.Column("sha256", sa.String(length=64), nullable=False))`` creates
    ``pins (id INTEGER NOT NULL, sha256 VARCHAR(64) NOT NULL, CONSTRAINT pk_pins PRIMARY KEY (id))``.
    """
    id_column = sa.Column("id", sa.Integer(), nullable=False)
    op.create_table(name, id_column, *items, sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{name}")))


def create_lineage_table(name: str, *items: SchemaItem, unique: Sequence[str], unique_name: str) -> None:
    """``create_table`` for the rows of a lineage: ``lineage_id`` after ``id``, a foreign key to
    ``lineages.id`` (``fk_NAME_lineage_id_lineages``), and one row per lineage and ``unique``.

    ``create_lineage_table("tags", sa.Column("tag", sa.String(length=64), nullable=False),
    unique=["tag"], unique_name="uq_tags_lineage_tag")`` creates ``tags (id INTEGER NOT NULL,
    lineage_id INTEGER NOT NULL, tag VARCHAR(64) NOT NULL, CONSTRAINT pk_tags PRIMARY KEY (id),
    CONSTRAINT fk_tags_lineage_id_lineages FOREIGN KEY(lineage_id) REFERENCES lineages (id),
    CONSTRAINT uq_tags_lineage_tag UNIQUE (lineage_id, tag))``.
    """
    create_table(
        name,
        sa.Column("lineage_id", sa.Integer(), nullable=False),
        *items,
        sa.ForeignKeyConstraint(["lineage_id"], ["lineages.id"], name=op.f(f"fk_{name}_lineage_id_lineages")),
        sa.UniqueConstraint("lineage_id", *unique, name=unique_name),
    )
