"""Output directories that never lose data: what tokmaint writes, and nothing else, it may replace.

Rules (every command with ``--out`` follows them):

* ``--out`` is a new or empty directory, or one tokmaint wrote for the same command, recognised by
  its marker file ``.tokmaint.json``, which records the run: the command, its inputs' hashes and
  its options. Anything else (a file, a directory with a user's files and no marker) is refused
  before anything is written.
* The same run again continues (``evolve`` verifies what is there and writes what is missing). A
  different run is refused, naming what differs, unless ``force``; even then only the files
  tokmaint wrote (the command's ``outputs`` patterns) are removed, never a user's file.
* Every directory or file set is written to a staging directory first and renamed into place;
  files are fsynced before the rename. Modes follow the umask. One command at a time writes
  into a directory (an exclusive lock on it), and no ``--out`` lies inside another's output.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> with OutputDir.claim(root / "run", command="demo", run={"seed": 1}, outputs=["v[0-9]+/data[.]txt"]) as out:
...     out.write_directory("v0001", lambda d: (d / "data.txt").write_text("one"))
>>> sorted(p.name for p in (root / "run").iterdir())
['.tokmaint.json', 'v0001']
>>> OutputDir.claim(root / "run", command="demo", run={"seed": 2}, outputs=["v[0-9]+/data[.]txt"])
Traceback (most recent call last):
...
tokenizer_service.errors.OutputError: ...run holds a different `tokmaint demo` run (seed: 1 there, 2 now); \
choose another --out, or pass --force to replace the files tokmaint wrote there
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizer_service.errors import OutputError

MARKER = ".tokmaint.json"
# Staging files and folders are named ".tokmaint-staging-<name>-<pid>": only these are cleaned up.
_STAGING = ".tokmaint-staging-"


def write_file(path: Path, data: bytes) -> None:
    """Write and fsync one file (a crash after this call cannot lose or truncate it)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_directory(path: Path) -> None:
    """Make renames inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _listing(names: Sequence[str], limit: int = 4, *, separator: str = ", ") -> str:
    """``a, b, c and 2 more``: a short list for an error message."""
    shown = separator.join(sorted(names)[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


@dataclass
class OutputDir:
    """A claimed output directory; ``resumed`` is True when it already held this very run."""

    path: Path
    command: str
    outputs: tuple[str, ...]
    resumed: bool
    option: str = "--out"
    _lock: int | None = field(default=None, repr=False)

    @classmethod
    def claim(
        cls,
        path: str | Path,
        *,
        command: str,
        run: dict[str, Any],
        outputs: Sequence[str],
        force: bool = False,
        option: str = "--out",
    ) -> "OutputDir":
        """Check ``path`` against the rules above and mark it as this run's.

        ``run`` identifies the run (JSON-serialisable); ``outputs`` are regular expressions for the
        paths (relative, POSIX) of the files this command writes: the only files ``force`` may
        remove. ``option`` names the directory's option in messages.
        """
        path = Path(path)
        out = cls(path=path, command=command, outputs=tuple(outputs), resumed=False, option=option)
        try:
            out._claim(run, force)
        except OSError as exc:
            out.release()
            raise OutputError(f"cannot write {option} {path}: {exc.strerror or exc}") from None
        except OutputError:
            out.release()
            raise
        return out

    def _claim(self, run: dict[str, Any], force: bool) -> None:
        path = self.path
        if path.exists() and not path.is_dir():
            raise OutputError(f"{self.option} {path} is a file, not a directory")
        for parent in path.resolve().parents:
            if (parent / MARKER).is_file():
                raise OutputError(
                    f"{self.option} {path} is inside {parent}, the output of another tokmaint command; "
                    "choose a directory outside it"
                )
        path.mkdir(parents=True, exist_ok=True)
        self._lock = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputError(f"another tokmaint command is writing into {path}; wait for it to end") from None
        marker = path / MARKER
        if marker.exists():
            try:
                recorded = json.loads(marker.read_text(encoding="utf-8"))
                recorded_command = recorded["command"]
                if not isinstance(recorded_command, str):
                    raise TypeError
                # A model folder's marker (write_file_set's) records no run: its command tells it apart.
                if recorded_command != self.command:
                    raise OutputError(
                        f"{path} holds the output of `tokmaint {recorded_command}`; choose another {self.option}"
                    )
                recorded_run = recorded["run"]
                if not isinstance(recorded_run, dict):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                raise OutputError(f"{marker} is not a marker tokmaint can read; choose another {self.option}") from None
            if recorded_run == run:
                self.resumed = True
            elif force:
                self._remove_outputs()
            else:
                changed = _listing(
                    [
                        f"{k}: {recorded_run.get(k)} there, {run.get(k)} now"
                        for k in sorted(set(recorded_run) | set(run))
                        if recorded_run.get(k) != run.get(k)
                    ],
                    3,
                    separator="; ",
                )
                raise OutputError(
                    f"{path} holds a different `tokmaint {self.command}` run ({changed}); choose another "
                    f"{self.option}, or pass --force to replace the files tokmaint wrote there"
                )
        else:
            foreign = [p.name for p in path.iterdir()]
            if foreign:
                raise OutputError(
                    f"{path} is not empty and was not written by tokmaint ({_listing(foreign)}); "
                    "choose a new or empty directory"
                )
        for stale in path.glob(f"{_STAGING}*"):
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        if not self.resumed:
            staged = path / f"{_STAGING}marker-{os.getpid()}"
            write_file(staged, json.dumps({"command": self.command, "run": run}, indent=2).encode("utf-8"))
            os.replace(staged, marker)
            fsync_directory(path)

    def release(self) -> None:
        """Let other commands write here again (the lock also ends with the process)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def __enter__(self) -> "OutputDir":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def owns(self, relative: str) -> bool:
        """Whether a path (relative, POSIX) is one of this command's outputs."""
        return any(re.fullmatch(pattern, relative) for pattern in self.outputs)

    def _owns_folder(self, name: str) -> bool:
        """Whether a top-level folder is one this command writes files into."""
        return any("/" in pattern and re.fullmatch(pattern.split("/", 1)[0], name) for pattern in self.outputs)

    def _remove_outputs(self) -> None:
        """Remove the files tokmaint wrote (and folders they leave empty); refuse, before removing
        anything, when one of its folders also holds a user's file."""
        files, foreign = [], []
        for p in sorted(self.path.rglob("*")):
            relative = p.relative_to(self.path).as_posix()
            if p.is_file() and self.owns(relative):
                files.append(p)
            elif p.is_file() and "/" in relative and self._owns_folder(relative.split("/", 1)[0]):
                foreign.append(relative)
        if foreign:
            raise OutputError(
                f"--force would have to replace folders of {self.path} that hold files tokmaint did "
                f"not write ({_listing(foreign)}); move them or choose another {self.option}"
            )
        for p in files:
            p.unlink()
        for folder in sorted({p.parent for p in files if p.parent != self.path}, reverse=True):
            if not any(folder.iterdir()):
                folder.rmdir()

    def _staging(self, name: str) -> Path:
        staging = self.path / f"{_STAGING}{name}-{os.getpid()}"
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
        return staging

    def write_directory(self, name: str, write: Callable[[Path], None]) -> None:
        """Create the folder ``name`` atomically: ``write`` fills a staging folder, which is then
        renamed; an existing folder is never replaced (versions are immutable)."""
        final = self.path / name
        if final.exists():
            raise OutputError(f"{final} exists already; versions are never overwritten")
        staging = self._staging(name)
        try:
            write(staging)
            for p in staging.iterdir():
                with open(p, "rb") as f:
                    os.fsync(f.fileno())
            os.rename(staging, final)
            fsync_directory(self.path)
        except OSError as exc:
            raise OutputError(f"cannot write {final}: {exc.strerror or exc}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def replace_files(self, write: Callable[[Path], None]) -> None:
        """Write a set of top-level files: ``write`` fills a staging folder, then each file is
        renamed over its old version (tokmaint's own, as ``claim`` checked)."""
        staging = self._staging("files")
        try:
            write(staging)
            for p in sorted(staging.iterdir()):
                with open(p, "rb") as f:
                    os.fsync(f.fileno())
                os.replace(p, self.path / p.name)
            fsync_directory(self.path)
        except OSError as exc:
            raise OutputError(f"cannot write into {self.path}: {exc.strerror or exc}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def umask() -> int:
    """The process's umask (POSIX reads it only by setting it: set and put back at once).

    >>> previous = os.umask(0o027); mask = umask(); _ = os.umask(previous)
    >>> oct(mask)
    '0o27'
    """
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(folder: Path) -> None:
    """Give ``folder`` and the files in it the modes a new folder and file get under the umask
    (0755 and 0644 under 022), whatever the writer chose: ``tempfile`` and some libraries'
    writers leave 0700 folders and 0600 files, which other users and tools cannot read.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())  # 0700
    >>> (folder / "f").touch(mode=0o600)
    >>> mask = os.umask(0o022); follow_umask(folder); _ = os.umask(mask)
    >>> oct(folder.stat().st_mode & 0o777), oct((folder / "f").stat().st_mode & 0o777)
    ('0o755', '0o644')
    """
    mask = umask()
    for path in [folder, *folder.iterdir()]:
        path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


def file_set_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of a folder :func:`write_file_set` wrote (``command``, ``files``, ``complete``),
    None when there is none; :class:`OutputError` when it cannot be read.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> file_set_marker(folder) is None
    True
    >>> _ = (folder / MARKER).write_text('{"command": "demo", "files": ["a"], "complete": false}')
    >>> file_set_marker(folder)["complete"]
    False
    """
    marker = folder / MARKER
    if not marker.is_file():
        return None
    try:
        recorded: dict[str, Any] = json.loads(marker.read_text(encoding="utf-8"))  # not an object: AttributeError
        files = recorded.setdefault("files", [])  # OutputDir's markers (evolve's...) name a command, not files
        if not (
            isinstance(recorded.get("command"), str)
            and isinstance(files, list)
            and all(isinstance(f, str) for f in files)
        ):
            raise TypeError
    except (ValueError, TypeError, AttributeError):  # AttributeError: JSON, but no object
        raise OutputError(f"{marker} is not a marker tokmaint can read; choose another folder") from None
    return recorded


def _write_marker(folder: Path, command: str, files: Iterable[str], *, complete: bool) -> None:
    staged = folder / f"{_STAGING}marker-{os.getpid()}"
    write_file(
        staged, json.dumps({"command": command, "files": sorted(files), "complete": complete}, indent=2).encode("utf-8")
    )
    staged.chmod(0o666 & ~umask())
    os.replace(staged, folder / MARKER)
    fsync_directory(folder)


def check_file_set(
    out: str | Path, *, command: str, legacy: str | None = None, option: str = "--out"
) -> dict[str, Any] | None:
    """Refuse (:class:`OutputError`) an ``out`` that :func:`write_file_set` would refuse, before
    the work that makes the set; the marker of the set ``command`` wrote there (None: a new or
    empty folder).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> check_file_set(folder, command="demo") is None
    True
    >>> _ = (folder / "notes.txt").write_text("mine")
    >>> check_file_set(folder, command="demo")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tokenizer_service.errors.OutputError: ... is not empty and was not written by tokmaint (notes.txt); \
choose a new or empty --out
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{option} {out} is a file, not a directory")
    if not out.is_dir():
        return None
    old = file_set_marker(out)
    if old is not None and old["command"] != command:
        raise OutputError(f"{out} holds the output of `tokmaint {old['command']}`; choose another {option}")
    if old is None and legacy is not None and (out / legacy).is_file():
        old = {"command": command, "files": []}  # written before markers: only the names written now are ours
    if old is None and any(out.iterdir()):
        raise OutputError(
            f"{out} is not empty and was not written by tokmaint "
            f"({_listing([p.name for p in out.iterdir()])}); choose a new or empty {option}"
        )
    return old


def write_file_set(
    out: str | Path, write: Callable[[Path], None], *, command: str, legacy: str | None = None, option: str = "--out"
) -> list[str]:
    """Write the files ``write`` puts into a folder (a model folder: a set that only makes sense
    whole) as the folder ``out``, beside any file of the user's there; the names written.

    * A new or empty ``out``: the set is staged beside it and renamed into place (atomic).
    * An ``out`` this ``command`` wrote (its marker, ``.tokmaint.json``, names the files; or,
      written before markers, a folder holding ``legacy``): the marker is first rewritten to say
      the set is unfinished, the files of the old set that the new one lacks are removed, the new
      files renamed over the old, and the marker rewritten complete. A crash between leaves a
      folder marked unfinished, which readers refuse (:func:`file_set_marker`) and the same
      command completes. A file the marker does not name is never touched: a user's README or
      folder beside the model stays.
    * Anything else is refused before anything is written.

    Folders and files get the modes of the umask.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "model"
    >>> write_file_set(out, lambda d: (d / "weights").write_text("1"), command="demo")
    ['weights']
    >>> (out / "README").write_text("mine")
    4
    >>> write_file_set(out, lambda d: (d / "config").write_text("2"), command="demo")
    ['config']
    >>> sorted(p.name for p in out.iterdir())
    ['.tokmaint.json', 'README', 'config']
    """
    out = Path(out)
    old = check_file_set(out, command=command, legacy=legacy, option=option)
    if out.is_dir():
        lock = os.open(out, os.O_RDONLY)  # released when the function returns (or the process ends)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            raise OutputError(f"another tokmaint command is writing into {out}; wait for it to end") from None
        try:
            return _replace_file_set(out, write, command=command, old=old, option=option)
        finally:
            os.close(lock)
    return _replace_file_set(out, write, command=command, old=None, option=option)


def _replace_file_set(
    out: Path, write: Callable[[Path], None], *, command: str, old: dict[str, Any] | None, option: str
) -> list[str]:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fresh = not out.exists()
        # What a crash left staged (only names of this form are removed: tokmaint's own).
        for stale in [
            *out.parent.glob(f".{glob.escape(out.name)}{_STAGING}*"),
            *(() if fresh else out.glob(f"{_STAGING}*")),
        ]:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        pid = os.getpid()
        staging = out.parent / f".{out.name}{_STAGING}{pid}" if fresh else out / f"{_STAGING}files-{pid}"
        staging.mkdir()
        try:
            write(staging)
            names = sorted(p.name for p in staging.iterdir())
            for name in names:
                if not (staging / name).is_file() or name == MARKER:
                    raise ValueError(f"a file set holds files only, not {name}")
                with open(staging / name, "rb") as f:
                    os.fsync(f.fileno())
            follow_umask(staging)
            if fresh:
                _write_marker(staging, command, names, complete=True)
                os.rename(staging, out)
                fsync_directory(out.parent)
                return names
            old = old or {"files": []}  # an empty folder
            owned = set(old["files"]) | set(names)
            _write_marker(out, command, owned, complete=False)
            for name in sorted(set(old["files"]) - set(names)):
                (out / name).unlink(missing_ok=True)
            for name in names:
                os.replace(staging / name, out / name)
            _write_marker(out, command, names, complete=True)
            return names
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        raise OutputError(f"cannot write {option} {out}: {exc.strerror or exc}") from None


class StepLog:
    """An append-only JSONL log (``steps.jsonl``): each record is flushed when written; on a
    resumed run the records already there are kept (a torn last line from a crash is cut) and
    each replayed record must equal the one logged, so the log describes one run only."""

    def __init__(self, path: Path, *, resume: bool) -> None:
        self.path = path
        self.logged: list[dict[str, Any]] = []
        keep = 0
        if resume and path.exists():
            with open(path, "rb") as f:
                for line in f:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        break
                    if not line.endswith(b"\n") or not isinstance(record, dict):
                        break
                    self.logged.append(record)
                    keep += len(line)
        self._file = open(path, "r+b" if keep else "wb")
        self._file.truncate(keep)
        self._file.seek(keep)
        self.count = 0

    def write(self, record: dict[str, Any]) -> None:
        """Log the next record, or check it against the one a previous run logged."""
        index, self.count = self.count, self.count + 1
        if index < len(self.logged):
            if self.logged[index] != record:
                raise OutputError(
                    f"{self.path} line {index + 1} differs from this run ({self.logged[index]} there, "
                    f"{record} now); choose another --out, or pass --force"
                )
            return
        self._file.write(json.dumps(record).encode("utf-8") + b"\n")
        self._file.flush()

    def sync(self) -> None:
        """fsync the log (after each version, so a logged version is never lost to a power cut)."""
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()
