"""aliases that differ from a version reference only in case renamed

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

Names are case-exact: ``MAIN``, ``Latest`` and git's ``HEAD`` (in any case) name neither a version
nor an alias (``registry/refs.py``), since as an alias ``MAIN`` named one version while ``main``
named the newest. Aliases stored under such a name before the rule are renamed as migration 0005
renamed those that shadow a version reference: ``alias-NAME`` (``alias-NAME-2`` … where that is
taken), still pointing at their version, each renaming logged. Nothing is deleted.
"""

import importlib
import logging

from alembic import op
import sqlalchemy as sa


revision = "0006"
down_revision = "0005"

log = logging.getLogger("tokmaint.migrations")
# The names as they stood when this migration was written (registry/refs.py's version_reference),
# kept here: a migration must do the same whenever it runs.
CASE_VARIANTS = ("latest", "main", "head")
# 0005's renaming, which this one repeats for other names (its module name starts with a digit).
free_name = importlib.import_module("registry.migrations.versions.0005_aliases_that_shadow_versions").free_name

aliases = sa.table(
    "aliases", sa.column("id", sa.Integer), sa.column("lineage_id", sa.Integer), sa.column("name", sa.String)
)
lineages = sa.table("lineages", sa.column("id", sa.Integer), sa.column("name", sa.String))


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
        if name.lower() in CASE_VARIANTS:
            new = free_name(name, taken[lineage_id])
            taken[lineage_id].add(new)
            connection.execute(aliases.update().where(aliases.c.id == alias_id).values(name=new))
            log.warning(
                "lineage %r: alias %r is now %r (names are case-exact, and %r names no version)",
                lineage,
                name,
                new,
                name,
            )


def downgrade() -> None:
    """The renamed aliases keep their new names: an older registry reads them as any alias."""
