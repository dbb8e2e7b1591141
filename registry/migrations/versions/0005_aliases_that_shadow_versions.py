"""aliases that shadow version references renamed

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27

Aliases stored before the alias-name rule under a name the REST API and the Hub read as a version
reference (``main``, ``latest``, digits, ``v`` and digits, 40 hex characters) can no longer be
read by that name: each is renamed ``alias-NAME`` (``alias-NAME-2`` … where that is taken, cut
to 64 characters), still pointing at its version, and the renaming is logged. Nothing is deleted.
"""

import logging
import re

from alembic import op
import sqlalchemy as sa


revision = "0005"
down_revision = "0004"

log = logging.getLogger("tokmaint.migrations")
# The rule as it stood when this migration was written (registry/refs.py's version_reference),
# kept here: a migration must do the same whenever it runs.
SHADOWING = re.compile(r"latest|main|[vV]?[0-9]+|[0-9a-fA-F]{40}")

aliases = sa.table(
    "aliases", sa.column("id", sa.Integer), sa.column("lineage_id", sa.Integer), sa.column("name", sa.String)
)
lineages = sa.table("lineages", sa.column("id", sa.Integer), sa.column("name", sa.String))


def free_name(old: str, taken: set[str]) -> str:
    """``alias-OLD``, or ``alias-OLD-2``, ``-3`` … where that is in ``taken`` (at most 64 characters).

    >>> free_name("main", set()), free_name("main", {"alias-main"}), len(free_name("9" * 64, set()))
    ('alias-main', 'alias-main-2', 64)
    """
    name, n = f"alias-{old}"[:64], 1
    while name in taken:
        n += 1
        name = f"alias-{old}"[: 64 - len(f"-{n}")] + f"-{n}"
    return name


def upgrade() -> None:
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(aliases.c.id, aliases.c.lineage_id, aliases.c.name, lineages.c.name)
        .join(lineages, lineages.c.id == aliases.c.lineage_id)
        .order_by(aliases.c.lineage_id, aliases.c.name)
    ).all()
    taken: dict[int, set[str]] = {}
    for _, lineage_id, name, _ in rows:
        taken.setdefault(lineage_id, set()).add(name)
    for alias_id, lineage_id, name, lineage in rows:
        if SHADOWING.fullmatch(name) or name.isdigit():
            new = free_name(name, taken[lineage_id])
            taken[lineage_id].add(new)
            connection.execute(aliases.update().where(aliases.c.id == alias_id).values(name=new))
            log.warning(
                "lineage %r: alias %r is now %r (the REST API and the Hub read %r as a version reference)",
                lineage,
                name,
                new,
                name,
            )


def downgrade() -> None:
    """The renamed aliases keep their new names: an older registry reads them as any alias."""
