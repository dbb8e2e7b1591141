"""``/v1/tokenizers``: lineages, versions, artifacts, diffs, aliases, rollback, watch, and the
models published beside a version (a model folder uploaded as one tar; read over the Hub
protocol as the repository ``{lineage}-models``, ``hub.py``).

Reads are open; writes need the bearer token (``WriterDep``). Refusals answer 409/422 (or 404,
413) with ``{error_code, message, reasons}``. A numbered version never changes, so its
tokenizer.json is served from memory with its sha256 as ETag (``If-None-Match`` gives 304)
without touching the database.
"""

from __future__ import annotations

import io
import tarfile
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.types import DecoratedCallable
from pydantic import ValidationError

from registry.api.deps import RegistryDep, SettingsDep, WriterDep, read_body
from registry.api.downloads import ArtifactCache, download_headers, not_modified
from registry.api.watches import LatestNumbers, disconnected
from registry.model_folder import MAX_MODEL_FILES
from registry.refs import version_number
from registry.store import RegistryError
from schemas.registry_api import (
    AliasPublic,
    AliasSet,
    LineageCreate,
    LineagePublic,
    LineagesPublic,
    ModelPublic,
    ModelsPublic,
    RequestBody,
    RollbackCreate,
    VersionCreate,
    VersionPublic,
    VersionsPublic,
    body_problems,
)
from tokenizer_service.tokenizer_json import json_shape_problems, parse_json
from tokenizer_service.errors import InvalidTokenizer

router = APIRouter(prefix="/v1/tokenizers", tags=["tokenizers"])
Body = TypeVar("Body", bound=RequestBody)


def folder_files(data: bytes, limit: int, *, max_files: int = MAX_MODEL_FILES) -> dict[str, bytes]:
    """A model folder uploaded as an (uncompressed) tar of its files, by name; refused, before
    any file is read, when it is not a tar, holds anything but regular files at its top, a sparse
    file (its holes would be filled as it is read: a 10 KB tar could expand to gigabytes),
    more than ``max_files`` files, a name twice, or files that add up to more than ``limit``
    bytes or to more than the tar itself (an uncompressed tar holds its files' bytes)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            members = tar.getmembers()
            if odd := [
                m.name for m in members if m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE) or "/" in m.name.strip("/")
            ]:
                raise RegistryError("invalid_request", [f"the folder's tar holds {odd[0]!r}, not a file at its top"])
            if sparse := [m.name for m in members if m.issparse()]:
                raise RegistryError(
                    "invalid_request",
                    [f"the folder's tar holds {sparse[0]!r} as a sparse file; a model's files are sent whole"],
                )
            if len(members) > max_files:
                raise RegistryError(
                    "invalid_model",
                    [
                        f"the folder has {len(members):,} files; a model folder holds "
                        f"at most {max_files:,} (TOKMAINT_REGISTRY_MAX_MODEL_FILES)"
                    ],
                )
            if twice := [name for name, count in Counter(m.name.strip("/") for m in members).items() if count > 1]:
                raise RegistryError("invalid_request", [f"the folder's tar holds {twice[0]!r} more than once"])
            if (size := sum(m.size for m in members)) > limit:
                raise RegistryError("too_large", [f"the folder's files are {size:,} bytes; the limit is {limit:,}"])
            if size > len(data):
                raise RegistryError(
                    "invalid_request",
                    [f"the folder's files say they are {size:,} bytes; the tar that holds them is {len(data):,}"],
                )
            return {m.name.strip("/"): tar.extractfile(m).read() for m in members}
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:  # what a damaged tar raises
        raise RegistryError("invalid_request", [f"the body is not a tar of a model folder: {exc}"]) from None


async def json_body(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object, refused (413, 422) before anything is stored."""
    body = await read_body(request, limit)
    try:
        # Parsed once, remembering duplicate keys, so the tokenizer inside is not re-encoded.
        data = parse_json(body)
    except InvalidTokenizer as exc:
        raise RegistryError("invalid_request", [f"the body is {exc.reasons[0]}"]) from None
    if not isinstance(data, dict):
        raise RegistryError("invalid_request", ["the body must be a JSON object"])
    if problems := list(json_shape_problems(data)):  # a diff's config nested 500 deep, say
        raise RegistryError("invalid_request", [f"the body: {problem}" for problem in problems])
    return data


async def request_body(request: Request, model: type[Body], limit: int) -> Body:
    """The request's JSON body as ``model``, refused with every field that is wrong."""
    data = await json_body(request, limit)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RegistryError("invalid_request", body_problems(model, exc)) from None


def json_request(model: type[RequestBody]) -> dict[str, Any]:
    """``openapi_extra`` declaring ``model`` the operation's JSON body. The routes read the body
    themselves (the size limit before it is read, duplicate keys, nesting, the tokenizer's text
    not re-encoded), so FastAPI is given its schema, not the body."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


def publishing(path: str, model: type[RequestBody]) -> Callable[[DecoratedCallable], DecoratedCallable]:
    """The decorator of a route that publishes a version from a JSON body ``model``
    (``@publishing("/{name}/rollback", RollbackCreate)``): a POST at ``path``, answered 201 with
    the new version, whose declared body is ``model``'s schema (``json_request``)."""
    return router.post(path, status_code=201, response_model=VersionPublic, openapi_extra=json_request(model))


@router.get("", response_model=LineagesPublic)
def list_lineages(registry: RegistryDep) -> LineagesPublic:
    rows = [LineagePublic(name=n, latest=latest) for n, latest in registry.lineages()]
    return LineagesPublic(data=rows, count=len(rows))


@publishing("", LineageCreate)
async def create_lineage(
    request: Request, registry: RegistryDep, settings: SettingsDep, writer: WriterDep
) -> VersionPublic:
    """Create a lineage whose version 1 is the uploaded tokenizer.json (``tokenizer``: the file's
    text, stored and served as it is)."""
    body = await request_body(request, LineageCreate, settings.max_upload_bytes)
    info = await run_in_threadpool(
        registry.create_lineage, body.name, body.tokenizer, kind=body.kind, created_by=writer, metrics=body.metrics
    )
    request.app.state.metrics.publishes.labels(body.kind).inc()
    return VersionPublic.of(info)


@router.get("/{name}/versions", response_model=VersionsPublic)
def list_versions(
    name: str, registry: RegistryDep, settings: SettingsDep, offset: int = Query(0, ge=0), limit: int = Query(100, ge=1)
) -> VersionsPublic:
    rows, count = registry.versions(name, offset=offset, limit=min(limit, settings.max_page))
    return VersionsPublic(data=[VersionPublic.of(v) for v in rows], count=count)


@publishing("/{name}/versions", VersionCreate)
async def publish(
    name: str, request: Request, registry: RegistryDep, settings: SettingsDep, writer: WriterDep
) -> VersionPublic:
    """Publish a version on top of the latest (or of ``parent``, which must be the latest).
    ``tokenizer`` is the tokenizer.json's text, stored and served as it is; ``diff`` (optional)
    must equal the diff the registry computes."""
    body = await request_body(request, VersionCreate, settings.max_upload_bytes)
    info = await run_in_threadpool(
        registry.publish,
        name,
        body.tokenizer,
        diff_json=body.diff,
        kind=body.kind,
        parent=body.parent,
        created_by=writer,
        metrics=body.metrics,
    )
    request.app.state.metrics.publishes.labels(body.kind).inc()
    return VersionPublic.of(info)


@router.get("/{name}/versions/{ref}", response_model=VersionPublic)
def get_version(name: str, ref: str, registry: RegistryDep) -> VersionPublic:
    """A version by number, ``latest`` or alias."""
    return VersionPublic.of(registry.version(name, ref))


@router.get(
    "/{name}/versions/{ref}/tokenizer.json",
    responses={200: {"content": {"application/json": {}}}, 304: {"description": "not modified"}},
)
async def download_tokenizer(name: str, ref: str, request: Request, registry: RegistryDep) -> Response:
    """The version's tokenizer.json; ETag is its sha256 and ``If-None-Match`` answers 304."""
    cache: ArtifactCache = request.app.state.cache
    number = version_number(ref)
    sha = cache.shas.get((name, number)) if number is not None else None
    if sha is None:
        sha = (await run_in_threadpool(registry.version, name, ref)).sha256
        if number is not None:
            cache.shas[(name, number)] = sha
    headers = download_headers(sha, immutable=number is not None)
    if not_modified(sha, request.headers.get("if-none-match", "")):
        return Response(status_code=304, headers=headers)
    data = cache.blobs.get(sha) or await run_in_threadpool(cache.blob, registry, sha)
    return Response(content=data, media_type="application/json", headers=headers)


@router.get("/{name}/versions/{ref}/diff")
def get_diff(name: str, ref: str, registry: RegistryDep) -> Response:
    """The version's diff against its parent (a revision diff, ``schemas/revision_diff.schema.json``)."""
    info = registry.version(name, ref)
    return Response(
        content=registry.artifacts.get(info.diff_sha256),
        media_type="application/json",
        headers={"ETag": f'"{info.diff_sha256}"'},
    )


@router.get("/{name}/diff")
def composed_diff(
    name: str,
    registry: RegistryDep,
    start: int = Query(..., alias="from", ge=1),
    end: int | None = Query(None, alias="to", ge=1),
) -> Response:
    """One diff from version ``from`` to ``to`` (default: the latest): applying it equals applying
    every version's diff in turn."""
    end = end if end is not None else registry.version(name).number
    return Response(content=registry.composed_diff(name, start, end).to_json(), media_type="application/json")


@router.get("/{name}/watch", response_model=VersionPublic, responses={204: {"description": "nothing newer"}})
async def watch(
    name: str,
    request: Request,
    registry: RegistryDep,
    settings: SettingsDep,
    after: int = Query(0, ge=0),
    timeout: float = Query(30.0, ge=0),
) -> Any:
    """Long-poll: the latest version as soon as it is newer than ``after``; 204 on timeout (and,
    unread, once the client has gone: a shutdown need not wait for watches nobody waits for).
    The watches of a process are woken by one poller of the database (``registry.api.watches``)."""
    latest = await run_in_threadpool(registry.version, name)  # a lineage that does not exist: 404
    if latest.number <= after:
        numbers: LatestNumbers = request.app.state.latest_numbers
        if not await numbers.wait_newer(
            name, after=after, seconds=min(timeout, settings.max_watch_seconds), gone=disconnected(request.receive)
        ):
            return Response(status_code=204)
        latest = await run_in_threadpool(registry.version, name)
    return VersionPublic.of(latest)


@router.put(
    "/{name}/aliases/{alias}",
    response_model=AliasPublic,
    openapi_extra=json_request(AliasSet),
)
async def set_alias(
    name: str, alias: str, request: Request, registry: RegistryDep, settings: SettingsDep, writer: WriterDep
) -> AliasPublic:
    """Point an alias at a version (a number, ``latest`` or another alias)."""
    body = await request_body(request, AliasSet, settings.max_upload_bytes)
    number = await run_in_threadpool(registry.set_alias, name, alias, body.version)
    return AliasPublic(lineage=name, alias=alias, version=number)


@router.delete("/{name}/aliases/{alias}", status_code=204)
def delete_alias(name: str, alias: str, registry: RegistryDep, writer: WriterDep) -> Response:
    registry.delete_alias(name, alias)
    return Response(status_code=204)


@router.post(
    "/{name}/models",
    status_code=201,
    response_model=ModelPublic,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {
                    "schema": {"type": "string", "format": "binary", "description": "an uncompressed tar"}
                }
            },
        }
    },
)
async def publish_model(
    name: str,
    request: Request,
    registry: RegistryDep,
    settings: SettingsDep,
    writer: WriterDep,
    version: str = Query("latest"),
) -> ModelPublic:
    """Publish a model folder (a tar of its files: config.json, the weights, the version's
    tokenizer.json if any) beside the version it was trained with (a number, latest or an alias)."""
    files = await run_in_threadpool(
        folder_files,
        await read_body(request, settings.max_model_bytes),
        settings.max_model_bytes,
        max_files=settings.max_model_files,
    )
    info = await run_in_threadpool(
        registry.publish_model, name, files, version=version, created_by=writer, max_files=settings.max_model_files
    )
    return ModelPublic.of(info)


@router.get("/{name}/models", response_model=ModelsPublic)
def list_models(name: str, registry: RegistryDep) -> ModelsPublic:
    """The lineage's models, oldest first."""
    models = registry.models(name)
    return ModelsPublic(data=[ModelPublic.of(m) for m in models], count=len(models))


@publishing("/{name}/rollback", RollbackCreate)
async def rollback(
    name: str, request: Request, registry: RegistryDep, settings: SettingsDep, writer: WriterDep
) -> VersionPublic:
    """Publish a new version equal to an older one, with the diff that gets there."""
    body = await request_body(request, RollbackCreate, settings.max_upload_bytes)
    info = await run_in_threadpool(registry.rollback, name, body.to, created_by=writer)
    request.app.state.metrics.publishes.labels("rollback").inc()
    return VersionPublic.of(info)
