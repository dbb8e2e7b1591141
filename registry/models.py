"""The registry's tables (SQLAlchemy 2.x): lineages, their immutable numbered versions, the diffs
between versions, mutable aliases, the models published beside a version, the outbox of
revision events, and the artifacts a publish under way is storing (``pending_artifacts``).
Artifacts live in the content-addressed store (``artifacts.py``); rows hold their sha256.

Constraint names follow one naming convention, so Alembic can diff and migrate them.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, MetaData, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
VERSION_KINDS = ("initial", "tedtok", "litetoken", "import", "rollback")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Lineage(Base):
    """A named line of tokenizer versions; ``latest`` is the highest version number."""

    __tablename__ = "lineages"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    latest: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    versions: Mapped[list["Version"]] = relationship(back_populates="lineage", order_by="Version.number")

    def __repr__(self) -> str:
        return f"Lineage({self.name!r}, latest={self.latest})"


class Version(Base):
    """One immutable version: its tokenizer.json and diff are artifacts named by their sha256."""

    __tablename__ = "versions"
    __table_args__ = (UniqueConstraint("lineage_id", "number", name="uq_versions_lineage_number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    lineage_id: Mapped[int] = mapped_column(ForeignKey("lineages.id"))
    number: Mapped[int]
    parent_number: Mapped[int | None]
    kind: Mapped[str] = mapped_column(String(16))
    sha256: Mapped[str] = mapped_column(String(64))
    diff_sha256: Mapped[str] = mapped_column(String(64))
    vocab_size: Mapped[int]
    id_space: Mapped[int]
    merges: Mapped[int]
    changed_ids: Mapped[int]
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    created_by: Mapped[str] = mapped_column(String(128), default="")
    lineage: Mapped[Lineage] = relationship(back_populates="versions")

    def __repr__(self) -> str:
        return f"Version({self.lineage.name!r}, {self.number}, {self.kind}, {self.sha256[:12]})"


class Diff(Base):
    """The revision diff from version ``from_number`` to ``to_number`` of a lineage (an artifact):
    each version's own diff from its parent (``from_number`` is None for version 1), and the
    composed diffs trainers that skipped versions asked for, kept once computed."""

    __tablename__ = "diffs"
    __table_args__ = (UniqueConstraint("lineage_id", "from_number", "to_number", name="uq_diffs_lineage_from_to"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    lineage_id: Mapped[int] = mapped_column(ForeignKey("lineages.id"))
    from_number: Mapped[int | None]
    to_number: Mapped[int]
    sha256: Mapped[str] = mapped_column(String(64))
    changed_ids: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Alias(Base):
    """A mutable name (``serving``, ``candidate`` ...) for one version of a lineage."""

    __tablename__ = "aliases"
    __table_args__ = (UniqueConstraint("lineage_id", "name", name="uq_aliases_lineage_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    lineage_id: Mapped[int] = mapped_column(ForeignKey("lineages.id"))
    name: Mapped[str] = mapped_column(String(64))
    number: Mapped[int]
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class PublishedModel(Base):
    """A model trained with one version, published beside it (immutable): its files are
    artifacts, ``files`` maps each name to its sha256 and size. ``number`` counts a lineage's
    models; several may be published for one version, the newest answering for it."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("lineage_id", "number", name="uq_models_lineage_number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    lineage_id: Mapped[int] = mapped_column(ForeignKey("lineages.id"))
    number: Mapped[int]
    version: Mapped[int]
    files: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    created_by: Mapped[str] = mapped_column(String(128), default="")


class OutboxEvent(Base):
    """A revision event written in the publish's own transaction; a relay sends it, then marks it."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(primary_key=True)
    event_id: Mapped[str] = mapped_column(String(36), unique=True)
    lineage: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class PendingArtifact(Base):
    """An artifact a publish under way is about to store (or has stored) and will name in its
    commit: pinned before the blob is put, removed in the transaction that names it, so
    garbage collection never removes it in between (``Registry.collect_garbage``). A pin a
    killed publish left behind expires (``store.PIN_EXPIRY_SECONDS``)."""

    __tablename__ = "pending_artifacts"

    id: Mapped[int] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
