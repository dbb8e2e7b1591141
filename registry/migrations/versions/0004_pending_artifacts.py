"""pending_artifacts table

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26

The artifacts a publish under way pins before storing them, so that garbage collection leaves
them until the publish's commit names them.
"""

from alembic import op
import sqlalchemy as sa

from registry.migrations.tables import create_table, created_at_column


revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    create_table(
        "pending_artifacts",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        created_at_column(),
    )
    op.create_index(op.f("ix_pending_artifacts_created_at"), "pending_artifacts", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_pending_artifacts_created_at"), table_name="pending_artifacts")
    op.drop_table("pending_artifacts")
