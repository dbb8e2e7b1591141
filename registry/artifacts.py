"""Content-addressed artifact storage: a blob's name is its sha256, so names can never escape the
store and identical content is stored once.

:class:`ArtifactStore` is the interface the registry needs; :class:`LocalArtifactStore` keeps
blobs in a directory (``ab/cdef...``), written atomically. An object store implements the same
three methods.

>>> import tempfile
>>> store = LocalArtifactStore(tempfile.mkdtemp())
>>> name = store.put(b"{}")
>>> name[:12], store.get(name)
('44136fa355b3', b'{}')
>>> store.get("../../etc/passwd")
Traceback (most recent call last):
...
KeyError: "not an artifact name: '../../etc/passwd'"
"""

from __future__ import annotations

import abc
import hashlib
import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

from tokenizer_service.output_dir import fsync_directory, write_file

_NAME = re.compile(r"[0-9a-f]{64}")
# A staging file this old belongs to a writer that died: the largest upload (64 MB by default)
# is written in seconds.
STALE_STAGING_SECONDS = 3600


def artifact_name(data: bytes) -> str:
    """The name of a blob: its sha256, hex."""
    return hashlib.sha256(data).hexdigest()


def check_name(name: str) -> str:
    """A valid artifact name (64 lowercase hex digits), or KeyError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise KeyError(f"not an artifact name: {name!r}")
    return name


class ArtifactStore(abc.ABC):
    @abc.abstractmethod
    def put(self, data: bytes) -> str:
        """Store a blob (durably, before returning) and return its name."""

    @abc.abstractmethod
    def get(self, name: str) -> bytes:
        """The blob of that name; KeyError if there is none."""

    def chunks(self, name: str, *, size: int = 1 << 20) -> Iterator[bytes]:
        """The blob of that name a piece at a time (what a large download streams); KeyError
        if there is none. A store that can read a part at a time says so by overriding this."""
        yield self.get(name)

    @abc.abstractmethod
    def exists(self, name: str) -> bool:
        """Whether a blob of that name is stored."""

    @abc.abstractmethod
    def names(self, *, older_than: float) -> Iterator[str]:
        """The blobs last put more than ``older_than`` seconds ago (what garbage collection may remove)."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Remove a blob (none of that name: nothing to do)."""


class LocalArtifactStore(ArtifactStore):
    """Blobs in ``root/ab/cdef…``; each written to a staging file of its own (``.<name>.<pid>.<random>.tmp``),
    fsynced and renamed. Opening a store removes the staging files a killed writer left: those
    older than ``STALE_STAGING_SECONDS``, so that a live writer's file is left alone."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.stale_staging_removed = self._remove_stale_staging()

    def _remove_stale_staging(self) -> int:
        cutoff, removed = time.time() - STALE_STAGING_SECONDS, 0
        for staging in self.root.glob("??/.*.tmp"):
            try:
                if staging.stat().st_mtime < cutoff:
                    staging.unlink()
                    removed += 1
            except FileNotFoundError:  # another process cleaned it first
                continue
        return removed

    def path(self, name: str) -> Path:
        name = check_name(name)
        return self.root / name[:2] / name[2:]

    def put(self, data: bytes) -> str:
        name = artifact_name(data)
        final = self.path(name)
        try:
            # Put again: young again (the registry pins what it puts, so that garbage collection
            # leaves it to the row about to name it: ``Registry.collect_garbage``).
            os.utime(final)
            return name
        except FileNotFoundError:  # not stored, or deleted since it was looked at
            pass
        final.parent.mkdir(exist_ok=True)
        # One staging file per call: threads of one process writing the same blob at once
        # (identical rollbacks) must not share one.
        staging = final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
        write_file(staging, data)
        os.replace(staging, final)
        fsync_directory(final.parent)
        return name

    def get(self, name: str) -> bytes:
        try:
            return self.path(name).read_bytes()
        except FileNotFoundError:
            raise KeyError(f"no artifact {name}") from None

    def chunks(self, name: str, *, size: int = 1 << 20) -> Iterator[bytes]:
        """>>> import tempfile
        >>> store = LocalArtifactStore(tempfile.mkdtemp())
        >>> list(store.chunks(store.put(b"abcde"), size=2))
        [b'ab', b'cd', b'e']
        """
        try:
            file = self.path(name).open("rb")
        except FileNotFoundError:
            raise KeyError(f"no artifact {name}") from None
        with file:
            while piece := file.read(size):
                yield piece

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def names(self, *, older_than: float) -> Iterator[str]:
        cutoff = time.time() - older_than
        for path in self.root.glob("??/*"):
            name = path.parent.name + path.name
            try:
                if _NAME.fullmatch(name) and path.stat().st_mtime < cutoff:
                    yield name
            except FileNotFoundError:  # deleted meanwhile
                continue

    def delete(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)
