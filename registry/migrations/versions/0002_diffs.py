"""diffs table

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

A table of the diffs between versions: each version's own diff (filled in here from the
versions of registries made before it) and the composed diffs kept once computed.
"""

from alembic import op
import sqlalchemy as sa


revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    op.create_table(
        "diffs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("lineage_id", sa.Integer(), nullable=False),
        sa.Column("from_number", sa.Integer(), nullable=True),
        sa.Column("to_number", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("changed_ids", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["lineage_id"], ["lineages.id"], name=op.f("fk_diffs_lineage_id_lineages")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_diffs")),
        sa.UniqueConstraint("lineage_id", "from_number", "to_number", name="uq_diffs_lineage_from_to"),
    )
    op.execute(
        "INSERT INTO diffs (lineage_id, from_number, to_number, sha256, changed_ids, created_at) "
        "SELECT lineage_id, parent_number, number, diff_sha256, changed_ids, created_at FROM versions"
    )


def downgrade() -> None:
    op.drop_table("diffs")
