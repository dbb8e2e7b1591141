"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22

The registry's first tables (generated from ``registry.models`` and reviewed by hand).
"""

from alembic import op
import sqlalchemy as sa

from registry.migrations.tables import create_lineage_table, create_table, created_at_column, created_by_column


revision = "0001"
down_revision = None


def upgrade() -> None:
    create_table(
        "lineages",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("latest", sa.Integer(), nullable=False),
        created_at_column(),
        sa.UniqueConstraint("name", name=op.f("uq_lineages_name")),
    )
    create_table(
        "outbox",
        sa.Column("event_id", sa.String(length=36), nullable=False),
        sa.Column("lineage", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        created_at_column(),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("event_id", name=op.f("uq_outbox_event_id")),
    )
    create_lineage_table(
        "aliases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        unique=["name"],
        unique_name="uq_aliases_lineage_name",
    )
    create_lineage_table(
        "versions",
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("parent_number", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("diff_sha256", sa.String(length=64), nullable=False),
        sa.Column("vocab_size", sa.Integer(), nullable=False),
        sa.Column("id_space", sa.Integer(), nullable=False),
        sa.Column("merges", sa.Integer(), nullable=False),
        sa.Column("changed_ids", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        created_at_column(),
        created_by_column(),
        unique=["number"],
        unique_name="uq_versions_lineage_number",
    )


def downgrade() -> None:
    op.drop_table("versions")
    op.drop_table("aliases")
    op.drop_table("outbox")
    op.drop_table("lineages")
