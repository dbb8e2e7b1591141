"""pending_artifacts table

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26

The artifacts a publish under way pins before storing them, so that garbage collection leaves
them until the publish's commit names them.
"""

from alembic import op
import sqlalchemy as sa


revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_table(
        "pending_artifacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_artifacts")),
    )
    op.create_index(op.f("ix_pending_artifacts_created_at"), "pending_artifacts", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_pending_artifacts_created_at"), table_name="pending_artifacts")
    op.drop_table("pending_artifacts")
