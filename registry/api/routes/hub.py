"""The Hugging Face Hub protocol, read-only, at the registry's root: with ``HF_ENDPOINT`` set to
the registry's URL, ``AutoTokenizer.from_pretrained(lineage, revision=...)``,
``hf_hub_download`` and ``snapshot_download`` read a lineage's versions with no tokmaint code.

* A lineage is a repository; a version is a revision, named by its number (``12`` or ``v12``),
  by ``latest`` or ``main`` (the Hub clients' default: the latest), by an alias, or by its
  commit hash (:func:`commit_hash`: 40 hex characters, stable forever).
* A revision's files: ``tokenizer.json`` (the version's own bytes), ``tokenizer_config.json``
  and ``special_tokens_map.json`` (made from it: ``tokenizer_service.hub_files``) and
  ``revision_diff.json`` (its diff against its parent).
* ``HEAD``/``GET /{repo}/resolve/{revision}/{filename}`` answer with the headers the clients read:
  ``ETag`` (the file's sha256), ``X-Repo-Commit`` and the length; ``If-None-Match`` gives 304.
  ``GET /api/models/{repo}`` (``/revision/{revision}``) answers the repository's info, the
  version's metadata in ``cardData``; ``/api/models/{repo}/tree/{revision}`` lists its files.
* ``{lineage}-models`` is the repository of the models published beside the lineage's versions
  (``tokmaint registry publish-model``): ``AutoModelForCausalLM.from_pretrained`` reads it. Its
  revision ``12`` is the newest model trained with version 12, ``main`` the newest model; the
  version's tokenizer files are there too. A lineage named so takes the name first.
* Refusals carry the Hub's ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``,
  ``EntryNotFound``), so the clients raise their own not-found errors.

A numbered version never changes: its files are made once and kept (``HubFiles``); a name that
moves (``main``, an alias) is looked up at each request, so a client sees a new version at once.
A published model never changes either: a lineage's models are read once, a request reads only
those published since, and a revision's listing, info and tree are made once; a request costs
the same however many files a model holds. ``Content-Type`` follows the file's name, on HEAD as
on GET.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from registry.api.deps import RegistryDep
from registry.api.downloads import ArtifactCache, not_modified
from registry.store import Registry, RegistryError
from schemas.registry_api import ModelInfo, VersionInfo
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.hub_files import special_tokens_map, tokenizer_config

router = APIRouter(tags=["hub"])
COMMIT = re.compile(r"[0-9a-f]{40}")
_NUMBERED = re.compile(r"v?([0-9]{1,18})")  # past 18 digits: no version (SQL holds 2^63 - 1)


def commit_hash(lineage: str, number: int, sha256: str) -> str:
    """The commit hash a version has as a Hub revision: 40 hex characters, the same forever (a
    version never changes), different for every version of every lineage.

    >>> commit_hash("news", 12, "ab" * 32)[:12], len(commit_hash("news", 12, "ab" * 32))
    ('bde0dd6cf240', 40)
    """
    return hashlib.sha1(f"tokmaint {lineage} {number} {sha256}".encode()).hexdigest()


class HubNotFound(Exception):
    """A read the Hub clients must see as their own not-found error (``X-Error-Code``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def not_found_response(exc: HubNotFound) -> JSONResponse:
    """404 with the Hub's error headers (a header holds printable ASCII only: the message is
    escaped as a Python string literal would be)."""
    header = exc.message.encode("unicode_escape").decode("ascii")
    return JSONResponse(
        {"error": exc.message}, status_code=404, headers={"X-Error-Code": exc.code, "X-Error-Message": header}
    )


@dataclass(frozen=True)
class HubFile:
    """One file of a revision: its name, bytes' sha256 and length, and its git blob id (what
    the Hub's tree listing calls ``oid``); ``data`` for the files made here, None for an
    artifact the registry stores (read when asked)."""

    name: str
    sha256: str
    size: int
    oid: str
    data: bytes | None = None
    artifact: str | None = None

    @classmethod
    def made(cls, name: str, data: bytes) -> "HubFile":
        return cls(name, hashlib.sha256(data).hexdigest(), len(data), _git_blob([data], len(data)), data=data)

    @classmethod
    def stored(cls, name: str, sha256: str, size: int, pieces: Iterable[bytes]) -> "HubFile":
        """A stored artifact's file; ``pieces``: its bytes, read once for the blob id (a model's
        weights a piece at a time, never whole in memory)."""
        return cls(name, sha256, size, _git_blob(pieces, size), artifact=sha256)


def _git_blob(pieces: Iterable[bytes], size: int) -> str:
    """git's blob id of ``size`` bytes given in pieces.

    >>> _git_blob([b"hello ", b"world"], 11) == _git_blob([b"hello world"], 11)
    True
    """
    blob = hashlib.sha1(b"blob %d\0" % size)
    for piece in pieces:
        blob.update(piece)
    return blob.hexdigest()


@dataclass(frozen=True)
class HubRevision:
    """A version (or a model) as a Hub revision: its commit, its files, what ``cardData`` says of
    it and when it was made."""

    repo: str
    number: int
    commit: str
    files: dict[str, HubFile]
    card: dict[str, Any]
    created_at: datetime
    kind: str = "tokenizer"

    def file(self, name: str) -> HubFile:
        try:
            return self.files[name]
        except KeyError:
            some = ", ".join(list(self.files)[:8]) + (", …" if len(self.files) > 8 else "")
            raise HubNotFound(
                "EntryNotFound", f"{self.repo} has no file {name!r} at revision {self.number} (it has {some})"
            ) from None

    @cached_property
    def info_json(self) -> bytes:
        """``model_info()`` as sent (made once: a revision never changes)."""
        return json.dumps(self.model_info()).encode()

    @cached_property
    def tree_json(self) -> bytes:
        """The tree listing as sent (made once)."""
        return json.dumps(
            [{"type": "file", "oid": f.oid, "size": f.size, "path": f.name} for f in self.files.values()]
        ).encode()

    def model_info(self) -> dict[str, Any]:
        """``/api/models/{repo}``'s answer (the fields ``huggingface_hub.ModelInfo`` reads)."""
        created = self.created_at.isoformat().replace("+00:00", "Z")
        return {
            "_id": self.commit,
            "id": self.repo,
            "modelId": self.repo,
            "sha": self.commit,
            "private": False,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "lastModified": created,
            "createdAt": created,
            "library_name": "transformers",
            "tags": ["tokmaint", self.kind],
            "siblings": [{"rfilename": f.name, "size": f.size, "blobId": f.oid} for f in self.files.values()],
            "cardData": {"tokmaint": {**self.card, "commit": self.commit}},
        }


def _not_found(exc: RegistryError, repo: str, revision: str) -> HubNotFound:
    if exc.code == "lineage_not_found":
        return HubNotFound("RepoNotFound", f"no repository {repo!r} (no lineage of that name)")
    return HubNotFound(
        "RevisionNotFound",
        f"{repo} has no revision {revision!r}: a version number (12 or v12), latest, main, an alias or a commit hash",
    )


class HubFiles:
    """Every version's (and model's) revision, made at its first request and kept (neither ever
    changes), and the commit hashes seen, so that a commit names its version without a scan."""

    def __init__(self, *, model_max_length: int | None = None) -> None:
        self.model_max_length = model_max_length
        self._revisions: dict[tuple[str, str, int], HubRevision] = {}  # (repo, kind, number)
        self._commits: dict[tuple[str, str], int] = {}
        self._scanned: dict[str, int] = {}  # a lineage's versions whose commits are known: 1 to this
        # A lineage's models read so far, oldest first (immutable: a request reads only newer ones).
        self._models: dict[str, list[ModelInfo]] = {}
        self._lock = threading.Lock()

    def revision(self, registry: Registry, repo: str, revision: str) -> HubRevision:
        """The revision ``revision`` names in ``repo``: a lineage, or ``{lineage}-models`` (the
        models published beside its versions) when no lineage has that name."""
        try:
            return self._version(registry, repo, revision)
        except HubNotFound as exc:
            if exc.code != "RepoNotFound" or not repo.endswith(MODELS):
                raise
        return self._model(registry, repo, revision)

    def kept(self, repo: str, revision: str) -> HubRevision | None:
        """A numbered version's revision when it is kept already (no database read), else None."""
        number = _number(revision)
        return None if number is None else self._revisions.get((repo, "tokenizer", number))

    def _version(self, registry: Registry, repo: str, revision: str) -> HubRevision:
        try:
            if COMMIT.fullmatch(revision):
                number = self._commit(registry, repo, revision)
            else:
                number = _number(revision) or registry.resolve(repo, revision)
            kept = self._revisions.get((repo, "tokenizer", number))
            if kept is not None:
                return kept
            info = registry.version(repo, number)
        except RegistryError as exc:
            raise _not_found(exc, repo, revision) from None
        return self._keep(self._make(registry, repo, info))

    def _model(self, registry: Registry, repo: str, revision: str) -> HubRevision:
        """A model repository's revision: the model with that commit, or the newest model trained
        with the version a number, ``main`` or an alias names. The models were read once (a known
        commit asks nothing; another name asks only for models newer than those read), so a
        request costs the same however many files a model holds."""
        lineage = repo.removesuffix(MODELS)
        try:
            number = self._commits.get((repo, revision)) if COMMIT.fullmatch(revision) else None
            models = self._models.get(lineage, []) if number is not None else self._read_models(registry, lineage)
            if number is None and COMMIT.fullmatch(revision):  # a model newer than those read before
                number = self._commits.get((repo, revision))
            if not models:
                raise RegistryError("lineage_not_found", [])
            if number is not None:
                chosen = [models[number - 1]]
            elif COMMIT.fullmatch(revision):
                chosen = []
            elif revision in ("main", "latest"):
                chosen = models
            else:
                version = _number(revision) or registry.resolve(lineage, revision)
                chosen = [m for m in models if m.version == version]
            if not chosen:
                raise RegistryError("version_not_found", [])
        except RegistryError as exc:
            raise _not_found(exc, repo, revision) from None
        model = chosen[-1]
        kept = self._revisions.get((repo, "model", model.number))
        return kept if kept is not None else self._keep(self._make_model(registry, repo, model))

    def _read_models(self, registry: Registry, lineage: str) -> list[ModelInfo]:
        """The lineage's models, oldest first (numbered 1, 2, …): those read before and any newer."""
        known = self._models.get(lineage, [])
        newer = registry.models(lineage, after=len(known))
        if not newer:
            return known
        with self._lock:
            known = self._models.get(lineage, [])
            models = known + [m for m in newer if m.number > len(known)]
            self._models[lineage] = models
            for model in models[len(known) :]:
                self._commits[(lineage + MODELS, model_commit(model))] = model.number
        return models

    def _keep(self, made: HubRevision) -> HubRevision:
        with self._lock:
            self._commits[(made.repo, made.commit)] = made.number
            return self._revisions.setdefault((made.repo, made.kind, made.number), made)

    def _commit(self, registry: Registry, repo: str, commit: str) -> int:
        """The version with that commit hash. Numbers are gapless from 1: the versions scanned
        once are not read again, so a commit no version has costs one read of the newer ones."""
        if (number := self._commits.get((repo, commit))) is not None:
            return number
        while True:  # the commits of the versions not scanned yet, a page at a time
            offset = self._scanned.get(repo, 0)
            page, _ = registry.versions(repo, offset=offset, limit=1000)
            with self._lock:
                for info in page:
                    self._commits[(repo, commit_hash(repo, info.number, info.sha256))] = info.number
                self._scanned[repo] = max(self._scanned.get(repo, 0), offset + len(page))
            if (number := self._commits.get((repo, commit))) is not None:
                return number
            if len(page) < 1000:
                raise RegistryError("version_not_found", [f"no version of {repo!r} has commit {commit}"])

    def _tokenizer_files(self, registry: Registry, info: VersionInfo, *, model_max_length: int | None) -> list[HubFile]:
        data = registry.artifacts.get(info.sha256)
        tokenizer = BPETokenizer.from_json(data.decode("utf-8"))
        config = tokenizer_config(tokenizer, model_max_length=model_max_length)
        return [
            HubFile.stored("tokenizer.json", info.sha256, len(data), [data]),
            HubFile.made("tokenizer_config.json", json.dumps(config, indent=2).encode()),
            HubFile.made("special_tokens_map.json", json.dumps(special_tokens_map(tokenizer), indent=2).encode()),
        ]

    def _make(self, registry: Registry, repo: str, info: VersionInfo) -> HubRevision:
        diff = registry.artifacts.get(info.diff_sha256)
        files = [
            *self._tokenizer_files(registry, info, model_max_length=self.model_max_length),
            HubFile.stored("revision_diff.json", info.diff_sha256, len(diff), [diff]),
        ]
        return HubRevision(
            repo,
            info.number,
            commit_hash(repo, info.number, info.sha256),
            {f.name: f for f in files},
            info.model_dump(mode="json"),
            info.created_at,
        )

    def _make_model(self, registry: Registry, repo: str, model: ModelInfo) -> HubRevision:
        """The model's own files, and its version's tokenizer files where the folder has none."""
        info = registry.version(model.lineage, model.version)
        files = {
            name: HubFile.stored(name, f["sha256"], f["size"], registry.artifacts.chunks(f["sha256"]))
            for name, f in model.files.items()
        }
        positions = json.loads(registry.artifacts.get(model.files["config.json"]["sha256"])).get("n_positions")
        for file in self._tokenizer_files(registry, info, model_max_length=positions):
            files.setdefault(file.name, file)
        card = {**model.model_dump(mode="json"), "tokenizer_version": info.model_dump(mode="json")}
        return HubRevision(repo, model.number, model_commit(model), files, card, model.created_at, kind="model")


MODELS = "-models"  # {lineage}-models: the models published beside a lineage's versions


def model_commit(model: ModelInfo) -> str:
    """A published model's commit hash as a Hub revision (40 hex characters, the same forever)."""
    files = " ".join(f"{name}={f['sha256']}" for name, f in sorted(model.files.items()))
    return hashlib.sha1(f"tokmaint-model {model.lineage} {model.number} {files}".encode()).hexdigest()


def _number(revision: str) -> int | None:
    """The version number ``12`` or ``v12`` names (None for a name)."""
    numbered = _NUMBERED.fullmatch(revision)
    return int(numbered[1]) if numbered else None


def file_media_type(name: str) -> str:
    """The Content-Type a file is served with (on HEAD and GET alike): JSON is JSON, anything
    else (weights) bytes.

    >>> file_media_type("config.json"), file_media_type("model.safetensors")
    ('application/json', 'application/octet-stream')
    """
    return "application/json" if name.endswith(".json") else "application/octet-stream"


def _hub(request: Request) -> HubFiles:
    return request.app.state.hub


def _moves(revision: str, found: HubRevision) -> bool:
    """Whether a revision name can name another revision later: ``main``, an alias, and in a
    models repository a version's number too (a newer model of that version may come)."""
    if COMMIT.fullmatch(revision):
        return False
    return found.kind == "model" or not _NUMBERED.fullmatch(revision)


@router.api_route("/{repo}/resolve/{revision}/{filename:path}", methods=["GET", "HEAD"])
async def resolve(repo: str, revision: str, filename: str, request: Request, registry: RegistryDep) -> Response:
    """A file of a revision, with ``ETag`` (its sha256), ``X-Repo-Commit`` and its length."""
    hub = _hub(request)
    try:  # a numbered version's kept revision is at hand; any other name asks the database
        found = hub.kept(repo, revision) or await run_in_threadpool(hub.revision, registry, repo, revision)
        file = found.file(filename)
    except HubNotFound as exc:
        return not_found_response(exc)
    headers = {
        "ETag": f'"{file.sha256}"',
        "X-Repo-Commit": found.commit,
        "Accept-Ranges": "none",
        "Cache-Control": "no-cache" if _moves(revision, found) else "public, max-age=31536000, immutable",
    }
    if not_modified(file.sha256, ",".join(request.headers.getlist("if-none-match"))):
        return Response(status_code=304, headers=headers)
    media_type = file_media_type(file.name)
    if request.method == "HEAD":
        return Response(headers={**headers, "Content-Length": str(file.size)}, media_type=media_type)
    cache: ArtifactCache = request.app.state.cache
    if file.data is None and not cache.keeps(file.size):  # a model's weights: read as sent
        return StreamingResponse(
            registry.artifacts.chunks(file.artifact),
            media_type=media_type,
            headers={**headers, "Content-Length": str(file.size)},
        )
    data = (
        file.data
        if file.data is not None
        else (cache.blobs.get(file.artifact) or await run_in_threadpool(cache.blob, registry, file.artifact))
    )
    return Response(content=data, headers=headers, media_type=media_type)


@router.api_route("/{namespace}/{repo}/resolve/{revision}/{filename:path}", methods=["GET", "HEAD"])
def resolve_namespaced(namespace: str, repo: str) -> Response:
    """Lineage names hold no ``/``: a namespaced repository is none of the registry's."""
    return not_found_response(
        HubNotFound(
            "RepoNotFound",
            f"no repository {namespace}/{repo!r}: the registry's "
            "repositories are its lineages, named with no namespace",
        )
    )


@router.get("/api/models/{repo}")
@router.get("/api/models/{repo}/revision/{revision}")
def model_info(repo: str, request: Request, registry: RegistryDep, revision: str = "main") -> Response:
    """The repository at a revision (the latest by default): id, sha, files, ``cardData``."""
    try:
        return Response(_hub(request).revision(registry, repo, revision).info_json, media_type="application/json")
    except HubNotFound as exc:
        return not_found_response(exc)


@router.get("/api/models/{repo}/tree/{revision}")
@router.get("/api/models/{repo}/tree/{revision}/{path:path}")
def tree(repo: str, revision: str, request: Request, registry: RegistryDep, path: str = "") -> Response:
    """The revision's files (a flat folder: a path inside it names no folder)."""
    try:
        found = _hub(request).revision(registry, repo, revision)
        if path.strip("/"):
            raise HubNotFound("EntryNotFound", f"{repo} has no folder {path!r} at revision {found.number}")
    except HubNotFound as exc:
        return not_found_response(exc)
    return Response(found.tree_json, media_type="application/json")
