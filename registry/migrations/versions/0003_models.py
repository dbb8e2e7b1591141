"""models table

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26

Models published beside the version they were trained with (served over the Hub protocol).
"""

from alembic import op
import sqlalchemy as sa

from registry.migrations.tables import create_lineage_table, created_at_column, created_by_column


revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    create_lineage_table(
        "models",
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        created_at_column(),
        created_by_column(),
        unique=["number"],
        unique_name="uq_models_lineage_number",
    )


def downgrade() -> None:
    op.drop_table("models")
