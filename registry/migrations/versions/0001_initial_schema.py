"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22

The registry's first tables (generated from ``registry.models`` and reviewed by hand).
"""

from alembic import op
import sqlalchemy as sa


revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "lineages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("latest", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lineages")),
        sa.UniqueConstraint("name", name=op.f("uq_lineages_name")),
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.String(length=36), nullable=False),
        sa.Column("lineage", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        sa.UniqueConstraint("event_id", name=op.f("uq_outbox_event_id")),
    )
    op.create_table(
        "aliases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("lineage_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["lineage_id"], ["lineages.id"], name=op.f("fk_aliases_lineage_id_lineages")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_aliases")),
        sa.UniqueConstraint("lineage_id", "name", name="uq_aliases_lineage_name"),
    )
    op.create_table(
        "versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("lineage_id", sa.Integer(), nullable=False),
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
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(["lineage_id"], ["lineages.id"], name=op.f("fk_versions_lineage_id_lineages")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_versions")),
        sa.UniqueConstraint("lineage_id", "number", name="uq_versions_lineage_number"),
    )


def downgrade() -> None:
    op.drop_table("versions")
    op.drop_table("aliases")
    op.drop_table("outbox")
    op.drop_table("lineages")
