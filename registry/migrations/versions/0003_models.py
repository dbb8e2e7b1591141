"""models table

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26

Models published beside the version they were trained with (served over the Hub protocol).
"""

from alembic import op
import sqlalchemy as sa


revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("lineage_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(["lineage_id"], ["lineages.id"], name=op.f("fk_models_lineage_id_lineages")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("lineage_id", "number", name="uq_models_lineage_number"),
    )


def downgrade() -> None:
    op.drop_table("models")
