"""diffs table

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

A table of the diffs between versions: each version's own diff (filled in here from the
versions of registries made before it) and the composed diffs kept once computed.
"""

from alembic import op
import sqlalchemy as sa

from registry.migrations.tables import create_lineage_table, created_at_column


revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    create_lineage_table(
        "diffs",
        sa.Column("from_number", sa.Integer(), nullable=True),
        sa.Column("to_number", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("changed_ids", sa.Integer(), nullable=False),
        created_at_column(),
        unique=["from_number", "to_number"],
        unique_name="uq_diffs_lineage_from_to",
    )
    op.execute(
        "INSERT INTO diffs (lineage_id, from_number, to_number, sha256, changed_ids, created_at) "
        "SELECT lineage_id, parent_number, number, diff_sha256, changed_ids, created_at FROM versions"
    )


def downgrade() -> None:
    op.drop_table("diffs")
