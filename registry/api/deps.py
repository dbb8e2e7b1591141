"""What the handlers need, as ``Annotated`` dependencies: the registry, the settings, a writer."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status

from registry.config import RegistrySettings
from registry.store import Registry


def get_registry(request: Request) -> Registry:
    return request.app.state.registry


def get_settings(request: Request) -> RegistrySettings:
    return request.app.state.settings


def require_writer(request: Request) -> str:
    """The caller of a write endpoint: the bearer token must match (unless started --insecure-dev)."""
    settings: RegistrySettings = request.app.state.settings
    if settings.token is None:
        return "insecure-dev"
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(token.encode(), settings.token.encode()):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="a bearer token is required to write",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return "token"


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) as soon as it passes ``limit`` bytes: by its declared
    length, or while a chunked upload streams in (never buffered whole first)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, detail=f"the upload is {int(declared):,} bytes; the limit is {limit:,}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, detail=f"the upload is more than {limit:,} bytes; the limit is {limit:,}")
        chunks.append(chunk)
    return b"".join(chunks)


RegistryDep = Annotated[Registry, Depends(get_registry)]
SettingsDep = Annotated[RegistrySettings, Depends(get_settings)]
WriterDep = Annotated[str, Depends(require_writer)]
