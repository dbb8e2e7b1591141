"""The registry: lineages of immutable numbered tokenizer versions, aliases and revision events.

Every publish is validated (the core's ``validate`` plus the lineage rules below), its artifacts
are stored first (outside any transaction), and then one transaction numbers the version, moves
``latest`` and writes the revision event to the outbox: a version is visible with all its
artifacts or not at all. A publish that loses the race for its number leaves artifacts nobody
names (content-addressed, harmless) and retries on the new latest.

Garbage collection never removes what a version, a kept diff, a model or a publish under way
names, whatever the timing (``_store_and_name``): a publish pins its artifacts' names (a
``pending_artifacts`` row, committed) before it puts them, and the transaction that names them
checks that each is stored and removes the pins. Pinning and naming hold the artifacts lock
shared, ``collect_garbage`` holds it exclusive while it reads the names and deletes, so it sees
each name pinned or named, never neither. The lock is SQLite's one write lock (every write
transaction begins ``IMMEDIATE``, ``db.py``) or a PostgreSQL advisory lock of the transaction.

A version's tokenizer.json is stored and served as the exact bytes uploaded, and its sha256 is
theirs. The checks that need the ``tokenizers`` library run on those bytes, in a checking
process when there is one (``check_process``, ``checker.py``), while this process parses them
and checks the rest: a 50k-token publish then takes about as long as the slower half. A
tokenizer that crashes the library takes the checking process down, not the registry.

Lineage rules (every publish but a rollback): surviving tokens keep their ids; the parent's base
alphabet and special tokens stay, at their ids; the new version is no less reachable than its
parent; an uploaded diff must equal the diff the registry computes from parent and child.

Numbers are gapless and unique per lineage however many processes publish at once: SQLite
serialises writers (``BEGIN IMMEDIATE``, see ``db.py``), PostgreSQL locks the lineage row.
Re-publishing the latest version's content returns that version.

A model trained with a version can be published beside it (``publish_model``): a Hugging Face
model folder that loads as it will be served, its rows covering the version's ids and its
tokenizer.json and tokmaint.json, when it has them, the version's own (``model_folder.py``); its
files are artifacts too, stored before the row that names them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import Engine, delete, func, select, text
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from registry.artifacts import ArtifactStore, artifact_name
from registry.checker import EncodingChecker
from registry.model_folder import MAX_MODEL_FILES, model_folder_problems
from registry.models import (
    VERSION_KINDS,
    Alias,
    Diff,
    Lineage,
    OutboxEvent,
    PendingArtifact,
    PublishedModel,
    Version,
    utcnow,
)
from registry.refs import MAX_VERSION, alias_problem, version_number, version_reference
from schemas.json_values import json_kind
from schemas.registry_api import ModelInfo, VersionInfo
from schemas.revision import DiffEntry, RevisionDiff
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import InvalidTokenizer
from tokenizer_service.merge_graph import unreachable_tokens
from tokenizer_service.revision_diff import composed_diff, diff_entries
from tokenizer_service.settings import lineage_name
from tokenizer_service.validation import ValidationReport, check_encoding, validate

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
# A pin this old was left by a publish that was killed: the largest upload (a 2 GB model) is
# stored in minutes and a publish's checks are stopped after five. A publish still alive past
# it finds its artifacts checked at its commit all the same.
PIN_EXPIRY_SECONDS = 24 * 3600
# The PostgreSQL advisory lock that orders pinning and naming artifacts (shared) against garbage
# collection (exclusive): "tokmaint" in ASCII, a key no other lock of the database uses.
ARTIFACTS_LOCK = int.from_bytes(b"tokmaint", "big")
# Times a publish puts its artifacts again when its commit finds one gone (deleted by hand, or
# after its pin expired) before it is refused.
STORE_ATTEMPTS = 3
# Artifacts gc deletes under one hold of the artifacts lock: publishes wait for no more (20,000
# deletions held it 48 s on a loaded test machine, past SQLite's 30 s busy timeout).
GC_BATCH = 256


class RegistryError(Exception):
    """A refused request: a symbolic ``code``, the HTTP ``status`` it maps to and every reason."""

    STATUS = {
        "invalid_name": 422,
        "invalid_tokenizer": 422,
        "invalid_diff": 422,
        "invalid_request": 422,
        "too_large": 413,
        "lineage_exists": 409,
        "incompatible": 409,
        "stale_parent": 409,
        "lineage_not_found": 404,
        "version_not_found": 404,
        "alias_not_found": 404,
        "invalid_model": 422,
        "artifacts_missing": 503,
    }

    def __init__(self, code: str, reasons: list[str]) -> None:
        super().__init__(f"{code}: " + "; ".join(reasons))
        self.code, self.reasons, self.status = code, list(reasons), self.STATUS[code]


def aware(moment: datetime) -> datetime:
    """A time the database handed back, with its zone: SQLite hands back naive datetimes, and
    every time here is UTC.

    >>> aware(datetime(2024, 5, 1, 12)).isoformat()
    '2024-05-01T12:00:00+00:00'
    """
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def from_row(model: type[M], row: Any, **given: Any) -> M:
    """``model`` made of ``row``'s attributes of the same names as its fields, but for the fields
    ``given``, which are not read off the row (it names them otherwise, holds them in another form,
    or, as a version's ``lineage``, as a relationship to load).

    >>> from types import SimpleNamespace
    >>> from_row(ModelInfo, SimpleNamespace(number=2, version=5, files={}, created_by="ci"), lineage="gpt",
    ...          created_at=datetime(2024, 5, 1, tzinfo=timezone.utc)).version
    5
    """
    return model.model_validate(
        {name: given[name] if name in given else getattr(row, name) for name in model.model_fields}
    )


def version_info(row: Version, lineage: str) -> VersionInfo:
    """What a version's row says of it."""
    return from_row(VersionInfo, row, lineage=lineage, parent=row.parent_number, created_at=aware(row.created_at))


def model_info(row: PublishedModel, lineage: str) -> ModelInfo:
    """What a published model's row says of it."""
    return from_row(ModelInfo, row, lineage=lineage, created_at=aware(row.created_at))


def finite_number(value: Any) -> bool:
    """Whether a JSON value is a finite number (a boolean is none).

    >>> finite_number(3.2), finite_number(float("inf")), finite_number(True), finite_number("3")
    (True, False, False, False)
    """
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def metrics_problems(metrics: Any) -> list[str]:
    """Why a version's ``metrics`` cannot be stored: they must be an object of finite numbers
    (versions are immutable, so a bad value would break every page that plots them, for good).

    >>> metrics_problems({"bytes_per_token": 3.2, "rollback_to": 4})
    []
    >>> print(*metrics_problems({"bytes_per_token": "3.2", "x": float("nan"), "y": True}), sep="\\n")
    metrics.bytes_per_token: must be a number, got a string
    metrics.x: must be finite, got nan
    metrics.y: must be a number, got a boolean
    """
    if not isinstance(metrics, dict):
        return [f"metrics: must be an object of numbers, got {json_kind(metrics)}"]
    reasons = []
    for key, value in metrics.items():
        if not isinstance(key, str) or not 0 < len(key) <= 100:
            reasons.append(f"metrics: a name must be 1 to 100 characters, got {str(key)[:40]!r}")
        elif finite_number(value):
            continue
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            reasons.append(f"metrics.{key}: must be a number, got {json_kind(value)}")
        else:
            reasons.append(f"metrics.{key}: must be finite, got {value}")
    return reasons


def check_lineage_name(name: str) -> str:
    try:
        return lineage_name(name)
    except Exception as exc:  # argparse's error type carries the message
        raise RegistryError("invalid_name", [f"lineage name {str(exc)}"]) from None


def upload_text(data: bytes | str) -> tuple[str, bytes]:
    """An uploaded tokenizer.json as text and as the exact bytes stored (UTF-8).

    >>> upload_text("{}")
    ('{}', b'{}')
    """
    try:
        return (data.decode("utf-8"), data) if isinstance(data, bytes) else (data, data.encode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RegistryError("invalid_tokenizer", [f"not UTF-8 (byte at offset {exc.start})"]) from None
    except UnicodeEncodeError as exc:
        raise RegistryError("invalid_tokenizer", [f"not valid Unicode (a lone surrogate at {exc.start})"]) from None


def parse_tokenizer(text: str) -> BPETokenizer:
    """An uploaded tokenizer.json, refused with every reason (``invalid_tokenizer``)."""
    try:
        return BPETokenizer.from_json(text)
    except InvalidTokenizer as exc:
        raise RegistryError("invalid_tokenizer", exc.reasons) from None


def lineage_problems(parent: BPETokenizer, child: BPETokenizer, entries: list[DiffEntry]) -> list[str]:
    """The lineage rules a publish must keep (the core's ``validate`` comes on top), read off the
    diff ``entries`` from parent to child: a token whose id changed is the new token of the
    entry at its new id, so nothing else needs looking at.

    >>> t = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={})
    >>> u = t.replace_model(vocab={"a": 0, "b": 1, "ab": 3}, merges=[("a", "b")])
    >>> lineage_problems(t, u, diff_entries(t, u))
    ["1 surviving tokens changed their id, e.g. 'ab': 2 -> 3"]
    """
    reasons = []
    moved = [f"{e.new_token!r}: {parent.vocab[e.new_token]} -> {e.id}" for e in entries if e.new_token in parent.vocab]
    if moved:
        reasons.append(f"{len(moved)} surviving tokens changed their id, e.g. {', '.join(moved[:3])}")
    # A base token is one no merge forms: its entry lists no parents for it.
    lost = sorted(
        {
            e.old_token
            for e in entries
            if e.old_token is not None
            and e.old_token not in parent.special_tokens
            and not (e.parents if e.kind == "removed" else e.old_parents)
        }
    )
    if lost:
        reasons.append(f"{len(lost)} base tokens are missing or moved, e.g. {lost[:3]}")
    specials = {t["content"]: t["id"] for t in parent.pipeline.get("added_tokens", []) if t.get("special")}
    kept = {t["content"]: t["id"] for t in child.pipeline.get("added_tokens", []) if t.get("special")}
    gone = sorted(t for t, i in specials.items() if kept.get(t) != i)
    if gone:
        reasons.append(f"{len(gone)} special tokens are missing or moved, e.g. {gone[:3]}")
    # Ids alone tell a trainer what changed: text tokenized another way under the same ids
    # would reach it with an empty diff.
    changed = sorted(
        k
        for k in (parent.pipeline.keys() | child.pipeline.keys()) - {"added_tokens", "version"}
        if parent.pipeline.get(k) != child.pipeline.get(k)
    )
    changed += [
        f"model.{k}"
        for k in sorted(parent.model_options.keys() | child.model_options.keys())
        if parent.model_options.get(k) != child.model_options.get(k)
    ]
    if changed:
        reasons.append(
            f"the pipeline changed ({', '.join(changed)}): every version of a lineage tokenizes text "
            "the way its parent does, so that a diff of ids says all that changed; publish a tokenizer "
            "with another pipeline as a new lineage"
        )
    return reasons


class Registry:
    """The registry over a database ``engine`` (migrated: ``db.migrate``) and an artifact store."""

    def __init__(
        self, engine: Engine, artifacts: ArtifactStore, *, check_process: bool = False, cache_tokens: int = 1_000_000
    ) -> None:
        self.engine = engine
        self.artifacts = artifacts
        self._checker = EncodingChecker() if check_process else None
        # Parsed versions and their unreachable tokens, by sha256 (immutable): the next publish
        # validates against the latest without parsing it or encoding its whole vocabulary. Held
        # up to ``cache_tokens`` vocabulary tokens in all (memory follows them), two versions at
        # least: the latest of every lineage in use, not two versions in all.
        self.cache_tokens = cache_tokens
        self._prepared: OrderedDict[str, tuple[BPETokenizer, list[str]]] = OrderedDict()
        self._prepared_lock = threading.Lock()

    @property
    def cached_versions(self) -> int:
        """How many parsed versions are held."""
        return len(self._prepared)

    def _prepare(
        self, sha: str, tokenizer: BPETokenizer | None = None, unreachable: list[str] | None = None
    ) -> tuple[BPETokenizer, list[str]]:
        """A version's parsed tokenizer and unreachable tokens (kept for the versions used last)."""
        with self._prepared_lock:  # requests run on a thread pool
            cached = self._prepared.get(sha)
            if cached is not None:
                self._prepared.move_to_end(sha)
                return cached
        tokenizer = tokenizer or BPETokenizer.from_json(self.artifacts.get(sha).decode("utf-8"))
        cached = (tokenizer, unreachable if unreachable is not None else unreachable_tokens(tokenizer))
        with self._prepared_lock:
            self._prepared[sha] = cached
            held = sum(len(t) for t, _ in self._prepared.values())
            while len(self._prepared) > 2 and held > self.cache_tokens:
                held -= len(self._prepared.popitem(last=False)[1][0])
        return cached

    def close(self) -> None:
        """Stop the checking process (if any)."""
        if self._checker is not None:
            self._checker.close()

    def _encoding_check(self, text: str, data: bytes) -> Callable[[], ValidationReport]:
        """``check_encoding`` of an upload, started now in the checking process (if any) while
        the caller checks the rest; the returned function gives its report (computed once)."""
        if self._checker is None:
            return functools.cache(functools.partial(check_encoding, text))
        checker, future = self._checker, self._checker.submit(data)
        return functools.cache(lambda: checker.report(future))

    # ----- reading ------------------------------------------------------------------------
    def _lineage(self, session: Session, name: str, *, lock: bool = False) -> Lineage:
        query = select(Lineage).where(Lineage.name == name)
        lineage = session.scalars(query.with_for_update() if lock else query).one_or_none()
        if lineage is None:
            raise RegistryError("lineage_not_found", [f"no lineage {name!r}"])
        return lineage

    def lineages(self) -> list[tuple[str, int]]:
        """(name, latest version) of every lineage, by name."""
        with Session(self.engine) as session:
            return [
                (n, latest)
                for n, latest in session.execute(select(Lineage.name, Lineage.latest).order_by(Lineage.name))
            ]

    def versions(self, name: str, *, offset: int = 0, limit: int = 100) -> tuple[list[VersionInfo], int]:
        """A page of a lineage's versions, oldest first, and how many there are."""
        with Session(self.engine) as session:
            lineage = self._lineage(session, name)
            rows = session.scalars(
                select(Version)
                .where(Version.lineage_id == lineage.id)
                .order_by(Version.number)
                .offset(min(offset, MAX_VERSION))
                .limit(min(limit, MAX_VERSION))
            ).all()
            return [version_info(r, name) for r in rows], lineage.latest

    def version(self, name: str, ref: int | str = "latest") -> VersionInfo:
        """A version by number, ``latest`` or an alias name."""
        with Session(self.engine) as session:
            lineage = self._lineage(session, name)
            number = self._resolve(session, lineage, ref)
            row = session.scalars(
                select(Version).where(Version.lineage_id == lineage.id, Version.number == number)
            ).one_or_none()
            if row is None:
                raise RegistryError("version_not_found", [f"lineage {name!r} has no version {ref}"])
            return version_info(row, name)

    def resolve(self, name: str, ref: int | str = "latest") -> int:
        """The number a reference names (a number, ``latest`` or an alias), in one read: what a
        request that names a version it has at hand asks first."""
        with Session(self.engine) as session:
            return self._resolve(session, self._lineage(session, name), ref)

    def aliases(self, name: str) -> dict[str, int]:
        """A lineage's aliases and the version each names, by alias."""
        with Session(self.engine) as session:
            lineage = self._lineage(session, name)
            return dict(
                session.execute(
                    select(Alias.name, Alias.number).where(Alias.lineage_id == lineage.id).order_by(Alias.name)
                ).all()
            )

    def _resolve(self, session: Session, lineage: Lineage, ref: int | str) -> int:
        if (number := version_number(ref)) is not None:
            if not 0 < number <= MAX_VERSION:
                raise RegistryError("version_not_found", [f"lineage {lineage.name!r} has no version {number}"])
            return number
        if ref in ("latest", "main"):  # main: as the Hub reads it
            return lineage.latest
        if (reading := version_reference(ref)) is not None:  # never an old alias of that name
            raise RegistryError(
                "version_not_found", [f"lineage {lineage.name!r} has no version {ref!r} here: {reading}"]
            )
        alias = session.scalars(select(Alias).where(Alias.lineage_id == lineage.id, Alias.name == ref)).one_or_none()
        if alias is None:
            raise RegistryError("alias_not_found", [f"lineage {lineage.name!r} has no alias {ref!r}"])
        return alias.number

    def tokenizer(self, name: str, ref: int | str = "latest") -> BPETokenizer:
        return self._prepare(self.version(name, ref).sha256)[0]

    def diff(self, name: str, ref: int | str = "latest") -> RevisionDiff:
        """A version's own diff against its parent."""
        return RevisionDiff.from_dict(json.loads(self.artifacts.get(self.version(name, ref).diff_sha256)))

    def composed_diff(self, name: str, start: int, end: int) -> RevisionDiff:
        """One diff from version ``start`` to ``end``, for a trainer that skipped versions: the ids
        whose token differs between the two, with parents as of ``end``. Computed once, then
        kept in the diffs table (a version's own diff is the one from its parent)."""
        first, last = self.version(name, start), self.version(name, end)
        with Session(self.engine) as session:
            lineage = self._lineage(session, name)
            sha = session.scalar(
                select(Diff.sha256).where(
                    Diff.lineage_id == lineage.id, Diff.from_number == start, Diff.to_number == end
                )
            )
        if sha is not None:
            return RevisionDiff.from_dict(json.loads(self.artifacts.get(sha)))
        diff = composed_diff(
            self.tokenizer(name, start),
            self.tokenizer(name, end),
            lineage=name,
            start=first.number,
            end=last.number,
            parent_sha256=first.sha256,
            tokenizer_sha256=last.sha256,
        )
        data = diff.to_json().encode("utf-8")
        sha = artifact_name(data)

        def keep(session: Session) -> None:
            lineage = self._lineage(session, name)
            session.add(
                Diff(lineage_id=lineage.id, from_number=start, to_number=end, sha256=sha, changed_ids=len(diff.entries))
            )

        try:
            self._store_and_name({sha: data}, keep)
        except IntegrityError:
            pass  # a concurrent request kept the same diff first
        return diff

    # ----- writing ------------------------------------------------------------------------
    def create_lineage(
        self,
        name: str,
        tokenizer_json: bytes | str,
        *,
        kind: str = "initial",
        created_by: str = "",
        metrics: dict[str, Any] | None = None,
    ) -> VersionInfo:
        """A new lineage whose version 1 is the uploaded tokenizer (it must pass ``validate``)."""
        check_lineage_name(name)
        if reasons := metrics_problems(metrics or {}):
            raise RegistryError("invalid_request", reasons)
        text, data = upload_text(tokenizer_json)
        encoding = self._encoding_check(text, data)
        tokenizer = parse_tokenizer(text)
        report = validate(tokenizer, encoding=encoding())
        if report.reasons:
            raise RegistryError("invalid_tokenizer", report.reasons)
        exists = RegistryError("lineage_exists", [f"lineage {name!r} exists already"])
        if any(n == name for n, _ in self.lineages()):
            raise exists  # before any artifact is stored; the transaction below checks again
        blobs = self._version_blobs(name, 1, None, data, tokenizer, [], kind, metrics or {})
        artifacts = tuple(blobs)

        def insert(session: Session) -> VersionInfo:
            if session.scalars(select(Lineage).where(Lineage.name == name)).one_or_none() is not None:
                raise exists
            lineage = Lineage(name=name, latest=0)
            session.add(lineage)
            session.flush()
            return self._insert_version(
                session,
                lineage,
                tokenizer,
                artifacts,
                changed_ids=0,
                kind=kind,
                created_by=created_by,
                metrics=metrics or {},
            )

        info = self._store_and_name(blobs, insert)
        self._prepare(info.sha256, tokenizer, report.unreachable)
        return info

    def publish(
        self,
        name: str,
        tokenizer_json: bytes | str,
        *,
        diff_json: bytes | dict[str, Any] | None = None,
        kind: str = "tedtok",
        parent: int | None = None,
        created_by: str = "",
        metrics: dict[str, Any] | None = None,
    ) -> VersionInfo:
        """Publish a new version on top of ``parent`` (default: the latest; a stale parent is
        refused) after every check; the latest version's own content again returns it."""
        if kind not in VERSION_KINDS or kind == "initial":
            raise RegistryError("invalid_request", [f"kind must be one of {VERSION_KINDS[1:]}, got {kind!r}"])
        if reasons := metrics_problems(metrics or {}):
            raise RegistryError("invalid_request", reasons)
        text, data = upload_text(tokenizer_json)
        sha = hashlib.sha256(data).hexdigest()
        uploaded = self._parse_diff(diff_json) if diff_json is not None else None
        encoding, child = None, None
        while True:
            latest = self.version(name)
            if parent is not None and parent != latest.number:
                raise RegistryError(
                    "stale_parent",
                    [f"parent {parent} is not the latest version of {name!r} ({latest.number}); rebase on it"],
                )
            if sha == latest.sha256 and kind != "rollback":
                return latest
            if child is None:  # the library's checks run elsewhere while this process parses
                encoding = self._encoding_check(text, data)
                child = parse_tokenizer(text)
            parent_tokenizer, parent_unreachable = self._prepare(latest.sha256)
            entries, unreachable = self._check(
                parent_tokenizer, parent_unreachable, child, sha, uploaded, encoding, rollback=kind == "rollback"
            )
            # Artifacts before the transaction: a version is never visible without them, and
            # the write lock is not held while they are written.
            blobs = self._version_blobs(
                name, latest.number + 1, latest.sha256, data, child, entries, kind, metrics or {}
            )
            artifacts = tuple(blobs)
            try:
                info = self._store_and_name(
                    blobs,
                    lambda session: self._insert_on_top(
                        session,
                        name,
                        latest.number,
                        child,
                        artifacts,
                        changed_ids=len(entries),
                        kind=kind,
                        created_by=created_by,
                        metrics=metrics or {},
                    ),
                )
                self._prepare(info.sha256, child, unreachable)
                return info
            except _LatestMoved:
                if parent is not None:
                    raise RegistryError(
                        "stale_parent", [f"another version of {name!r} was published first; rebase on it"]
                    ) from None

    def rollback(self, name: str, to: int, *, created_by: str = "") -> VersionInfo:
        """Publish a new version whose content is version ``to``'s, with the diff that gets there."""
        target = self.version(name, to)
        return self.publish(
            name,
            self.artifacts.get(target.sha256),
            kind="rollback",
            created_by=created_by,
            metrics={"rollback_to": target.number},
        )

    def set_alias(self, name: str, alias: str, ref: int | str) -> int:
        """Point ``alias`` at a version (created or moved); returns its number."""
        if (problem := alias_problem(alias)) is not None:
            raise RegistryError("invalid_name", [problem])

        def move(session: Session) -> int:
            lineage = self._lineage(session, name)
            number = self._resolve(session, lineage, ref)
            if not 1 <= number <= lineage.latest:
                raise RegistryError("version_not_found", [f"lineage {name!r} has no version {ref}"])
            row = session.scalars(
                select(Alias).where(Alias.lineage_id == lineage.id, Alias.name == alias)
            ).one_or_none()
            if row is None:
                session.add(Alias(lineage_id=lineage.id, name=alias, number=number))
            else:
                row.number = number
            return number

        return self._write(move)

    def delete_alias(self, name: str, alias: str) -> None:
        def delete(session: Session) -> None:
            lineage = self._lineage(session, name)
            row = session.scalars(
                select(Alias).where(Alias.lineage_id == lineage.id, Alias.name == alias)
            ).one_or_none()
            if row is None:
                raise RegistryError("alias_not_found", [f"lineage {name!r} has no alias {alias!r}"])
            session.delete(row)

        self._write(delete)

    def pending_events(self, limit: int = 100) -> list[tuple[int, dict[str, Any]]]:
        """(outbox id, event) of events not yet marked sent, oldest first."""
        with Session(self.engine) as session:
            rows = session.scalars(
                select(OutboxEvent).where(OutboxEvent.sent_at.is_(None)).order_by(OutboxEvent.id).limit(limit)
            ).all()
            return [(r.id, dict(r.payload)) for r in rows]

    def mark_sent(self, ids: list[int]) -> None:
        def mark(session: Session) -> None:
            for row in session.scalars(select(OutboxEvent).where(OutboxEvent.id.in_(ids))):
                row.sent_at = utcnow()

        self._write(mark)

    def publish_model(
        self,
        name: str,
        files: dict[str, bytes],
        *,
        version: int | str = "latest",
        created_by: str = "",
        max_files: int = MAX_MODEL_FILES,
    ) -> ModelInfo:
        """Publish a model folder (its files by name, at most ``max_files``) beside the version
        it was trained with, after ``model_folder_problems``' checks; numbered after the
        lineage's models."""
        info = self.version(name, version)
        if problems := model_folder_problems(files, info, self.tokenizer(name, info.number), max_files=max_files):
            raise RegistryError("invalid_model", problems)
        stored = {file: {"sha256": artifact_name(data), "size": len(data)} for file, data in sorted(files.items())}

        def insert(session: Session) -> ModelInfo:
            lineage = self._lineage(session, name, lock=True)
            last = (
                session.scalar(select(func.max(PublishedModel.number)).where(PublishedModel.lineage_id == lineage.id))
                or 0
            )
            row = PublishedModel(
                lineage_id=lineage.id, number=last + 1, version=info.number, files=stored, created_by=created_by
            )
            session.add(row)
            session.flush()
            return model_info(row, name)

        return self._store_and_name({stored[file]["sha256"]: data for file, data in files.items()}, insert)

    def models(self, name: str, *, after: int = 0) -> list[ModelInfo]:
        """A lineage's models numbered past ``after`` (all by default), oldest first."""
        with Session(self.engine) as session:
            lineage = self._lineage(session, name)
            return [
                model_info(row, name)
                for row in session.scalars(
                    select(PublishedModel)
                    .where(PublishedModel.lineage_id == lineage.id, PublishedModel.number > after)
                    .order_by(PublishedModel.number)
                )
            ]

    def collect_garbage(
        self, *, older_than: float = 3600.0, dry_run: bool = False, batch: int = GC_BATCH
    ) -> dict[str, Any]:
        """Remove the artifacts put more than ``older_than`` seconds ago (finite, >= 0) that no
        version, kept diff, model or publish under way names (left by a refused or killed
        publish); clear the pins a killed publish left (older than ``PIN_EXPIRY_SECONDS``).
        What was (``dry_run``: would be) removed.

        The names are read and the artifacts deleted under the artifacts lock held exclusive:
        no publish pins or commits meanwhile, so each name a publish stores is pinned or named
        in what is read here, or pinned after the deletions (and then put again). ``batch``
        artifacts at most are deleted under one hold of the lock (the names read again each
        time), so that publishes wait for one batch, not for the whole collection."""
        if not finite_number(older_than) or older_than < 0:
            raise ValueError(f"older_than must be a finite number of seconds >= 0, got {older_than!r}")
        # Listed before the lock (a large store takes a while): whatever is listed, only what
        # is unnamed under the lock is deleted.
        old = sorted(self.artifacts.names(older_than=older_than))
        unnamed: list[str] = []
        named: set[str] = set()
        pinned: set[str] = set()
        expired_pins = 0
        for start in range(0, max(len(old), 1), batch):
            with Session(self.engine) as session, session.begin():
                self._lock_artifacts(session, exclusive=True)
                expired = PendingArtifact.created_at < utcnow() - timedelta(seconds=PIN_EXPIRY_SECONDS)
                pinned = set(session.scalars(select(PendingArtifact.sha256).where(~expired)))
                if start == 0:
                    expired_pins = session.scalar(select(func.count(PendingArtifact.id)).where(expired)) or 0
                named = set(session.scalars(select(Version.sha256))) | set(session.scalars(select(Version.diff_sha256)))
                named |= set(session.scalars(select(Diff.sha256)))
                named |= {
                    f["sha256"] for files in session.scalars(select(PublishedModel.files)) for f in files.values()
                }
                doomed = [name for name in old[start : start + batch] if name not in named and name not in pinned]
                if not dry_run:
                    session.execute(delete(PendingArtifact).where(expired))
                    for name in doomed:
                        self.artifacts.delete(name)
            unnamed += doomed
        return {
            "named": len(named | pinned),
            "pinned": len(pinned),
            "expired_pins": expired_pins,
            "removed": len(unnamed),
            "dry_run": dry_run,
            "artifacts": unnamed,
        }

    def count_versions(self) -> int:
        with Session(self.engine) as session:
            return session.scalar(select(func.count(Version.id))) or 0

    # ----- internals ----------------------------------------------------------------------
    def _write(self, work: Callable[[Session], T]) -> T:
        """Run ``work`` in one transaction (committed on success, rolled back on any error)."""
        with Session(self.engine) as session, session.begin():
            return work(session)

    def _lock_artifacts(self, session: Session, *, exclusive: bool) -> None:
        """Take the artifacts lock for the rest of the transaction: shared to pin or name
        artifacts, exclusive to collect garbage. SQLite's write transactions hold its one write
        lock already (``BEGIN IMMEDIATE``, ``db.py``)."""
        if self.engine.dialect.name == "postgresql":
            function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
            session.execute(text(f"SELECT {function}(:key)"), {"key": ARTIFACTS_LOCK})

    def _store_and_name(self, blobs: dict[str, bytes], name_them: Callable[[Session], T]) -> T:
        """Store ``blobs`` (by their names, ``artifact_name``'s: hashed once) and run
        ``name_them``, the transaction whose rows name them, so that garbage collection can never
        remove one in between: their names are pinned (committed) before any is put; the naming
        transaction checks that each is stored and removes the pins. One gone by then (deleted by
        hand, or its pin expired) is put again and the commit tried again, up to ``STORE_ATTEMPTS``
        times, then refused: a row never names a missing artifact. A refused or failed naming
        removes the pins."""
        names = list(blobs)
        pins = self._write(functools.partial(self._pin, names))
        try:
            for _ in range(STORE_ATTEMPTS):
                for data in blobs.values():
                    self.artifacts.put(data)
                try:
                    return self._write(functools.partial(self._name_pinned, names, pins, name_them))
                except _ArtifactsMissing as exc:
                    missing = exc.names
            raise RegistryError(
                "artifacts_missing",
                [
                    f"artifact {name} was removed from the store as it was being published; nothing was published"
                    for name in missing
                ],
            )
        except BaseException:
            with contextlib.suppress(SQLAlchemyError):  # else they expire
                self._write(
                    lambda session: session.execute(delete(PendingArtifact).where(PendingArtifact.id.in_(pins)))
                )
            raise

    def _pin(self, names: list[str], session: Session) -> list[int]:
        self._lock_artifacts(session, exclusive=False)
        if self.engine.dialect.name == "postgresql":
            # A pin must be seen by gc, not survive a crash: a publish whose pin a crash lost
            # finds its artifacts checked at its commit. Visible at once, it skips the wait for
            # the disk (about 10 ms; SQLite has no such setting for one transaction).
            session.execute(text("SET LOCAL synchronous_commit TO OFF"))
        rows = [PendingArtifact(sha256=name) for name in names]
        session.add_all(rows)
        session.flush()
        return [row.id for row in rows]

    def _name_pinned(self, names: list[str], pins: list[int], name_them: Callable[[Session], T], session: Session) -> T:
        self._lock_artifacts(session, exclusive=False)
        if missing := [name for name in names if not self.artifacts.exists(name)]:
            raise _ArtifactsMissing(missing)
        named = name_them(session)
        session.execute(delete(PendingArtifact).where(PendingArtifact.id.in_(pins)))
        return named

    @staticmethod
    def _parse_diff(diff_json: bytes | dict[str, Any]) -> RevisionDiff:
        try:
            return RevisionDiff.from_dict(diff_json if isinstance(diff_json, dict) else json.loads(diff_json))
        except Exception as exc:  # JSON or schema errors: their text is the reason
            raise RegistryError(
                "invalid_diff", [f"the diff is not a revision diff: {str(exc).splitlines()[0]}"]
            ) from None

    @staticmethod
    def _check(
        parent: BPETokenizer,
        parent_unreachable: list[str],
        child: BPETokenizer,
        sha: str,
        uploaded: RevisionDiff | None,
        encoding: Callable[[], ValidationReport],
        *,
        rollback: bool,
    ) -> tuple[list[DiffEntry], list[str]]:
        """Every check of a publish; returns the child's diff entries and unreachable tokens. The
        lineage rules and the diff come first: the library's checks may still be running."""
        expected = diff_entries(parent, child)
        reasons = [] if rollback else lineage_problems(parent, child, expected)
        if uploaded is not None:
            if uploaded.tokenizer_sha256 != sha:
                reasons.append(
                    f"the diff describes tokenizer {uploaded.tokenizer_sha256[:12]}, not the uploaded {sha[:12]}"
                )
            if uploaded.entries != expected:
                wrong = sorted(
                    {e.id for e in uploaded.entries} ^ {e.id for e in expected}
                    | {a.id for a, b in zip(uploaded.entries, expected) if a != b}
                )
                reasons.append(
                    f"the diff does not match the tokenizers: {len(uploaded.entries)} entries uploaded, "
                    f"{len(expected)} computed, ids differ at e.g. {wrong[:5]}"
                )
        report = validate(child, parent=parent, parent_unreachable=parent_unreachable, encoding=encoding())
        if report.reasons:
            raise RegistryError("invalid_tokenizer", report.reasons)
        if reasons:
            raise RegistryError("incompatible", reasons)
        return expected, report.unreachable

    @staticmethod
    def _version_blobs(
        name: str,
        number: int,
        parent_sha: str | None,
        data: bytes,
        child: BPETokenizer,
        entries: list[DiffEntry],
        kind: str,
        metrics: dict[str, Any],
    ) -> dict[str, bytes]:
        """The artifacts of version ``number`` by name: the uploaded tokenizer.json, then the
        registry's diff."""
        sha = artifact_name(data)
        diff = RevisionDiff(
            lineage=name,
            version=number,
            parent_version=number - 1 or None,
            tokenizer_sha256=sha,
            parent_sha256=parent_sha,
            vocab_size=len(child),
            id_space=child.id_space,
            entries=entries,
            config={"kind": kind, **({"metrics": metrics} if metrics else {})},
        )
        diff_data = diff.to_json().encode("utf-8")
        return {sha: data, artifact_name(diff_data): diff_data}

    def _insert_on_top(
        self, session: Session, name: str, expected: int, child: BPETokenizer, artifacts: tuple[str, str], **row: Any
    ) -> VersionInfo:
        lineage = self._lineage(session, name, lock=True)
        if lineage.latest != expected:
            raise _LatestMoved()
        return self._insert_version(session, lineage, child, artifacts, **row)

    def _insert_version(
        self,
        session: Session,
        lineage: Lineage,
        child: BPETokenizer,
        artifacts: tuple[str, str],
        *,
        changed_ids: int,
        kind: str,
        created_by: str,
        metrics: dict[str, Any],
    ) -> VersionInfo:
        """The row, ``latest`` and the outbox event, in the caller's transaction."""
        number = lineage.latest + 1
        sha, diff_sha = artifacts
        row = Version(
            lineage_id=lineage.id,
            number=number,
            parent_number=lineage.latest or None,
            kind=kind,
            sha256=sha,
            diff_sha256=diff_sha,
            vocab_size=len(child),
            id_space=child.id_space,
            merges=len(child.merges),
            changed_ids=changed_ids,
            metrics=metrics,
            created_by=created_by,
        )
        session.add(row)
        session.add(
            Diff(
                lineage_id=lineage.id,
                from_number=row.parent_number,
                to_number=number,
                sha256=diff_sha,
                changed_ids=changed_ids,
            )
        )
        lineage.latest = number
        event = {
            "event_id": str(uuid.uuid4()),
            "lineage": lineage.name,
            "version": number,
            "parent_version": row.parent_number,
            "sha256": sha,
            "kind": kind,
            "download_url": f"/v1/tokenizers/{lineage.name}/versions/{number}/tokenizer.json",
            "created_at": utcnow().isoformat(),
        }
        session.add(OutboxEvent(event_id=event["event_id"], lineage=lineage.name, payload=event))
        try:
            session.flush()
        except IntegrityError:
            raise _LatestMoved() from None
        row.lineage = lineage
        return version_info(row, lineage.name)


class _LatestMoved(Exception):
    """Another publish took the next number first (the caller retries on the new latest)."""


class _ArtifactsMissing(Exception):
    """A publish's commit found artifacts it names gone from the store (it puts them again)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(", ".join(names))
        self.names = names
