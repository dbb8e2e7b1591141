"""A numbered version's tokenizer.json, downloaded: immutable, so kept in memory and named by
its sha256 (the ETag; ``If-None-Match`` answers 304). ``CachedDownloads`` answers the hot path (a
trainer revalidating) before routing, from memory; the route
(``routes.tokenizers.download_tokenizer``) answers the rest with the same headers, and fills the
cache.

    app.state.cache = cache = ArtifactCache(max_bytes=256 * 1024 * 1024)
    app.add_middleware(CachedDownloads, cache=cache)
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from types import SimpleNamespace

from starlette.types import ASGIApp, Receive, Scope, Send

from registry.store import Registry


class ArtifactCache:
    """Numbered versions' sha256 and the artifacts' bytes, kept in memory (both immutable), the
    least recently used let go past ``max_bytes``. A blob over ``max_bytes / 16`` (a model's
    weights) is not kept: it is streamed from the store (``keeps``). Requests read it from
    threads of their own: the lock keeps the order and the size true.

    >>> cache = ArtifactCache(max_bytes=64)
    >>> cache.keeps(4), cache.keeps(5)
    (True, False)
    """

    def __init__(self, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.shas: dict[tuple[str, int], str] = {}
        self.blobs: OrderedDict[str, bytes] = OrderedDict()
        self.size, self.max_bytes = 0, max_bytes
        self._lock = threading.Lock()

    def keeps(self, size: int) -> bool:
        """Whether a blob of ``size`` bytes is kept here (else streamed from the store)."""
        return size <= self.max_bytes // 16

    def blob(self, registry: Registry, sha: str) -> bytes:
        with self._lock:
            data = self.blobs.get(sha)
            if data is not None:
                self.blobs.move_to_end(sha)
                return data
        data = registry.artifacts.get(sha)  # read outside the lock: another read need not wait
        with self._lock:
            if sha not in self.blobs:
                self.blobs[sha] = data
                self.size += len(data)
                while self.size > self.max_bytes and len(self.blobs) > 1:
                    self.size -= len(self.blobs.popitem(last=False)[1])
        return data


def download_headers(sha: str, *, immutable: bool) -> dict[str, str]:
    """A tokenizer.json download's ETag and caching (a numbered version never changes)."""
    return {"ETag": f'"{sha}"', "Cache-Control": "public, max-age=31536000, immutable" if immutable else "no-cache"}


# One member of an If-None-Match list (RFC 9110): "*", or an entity tag, weak (W/"...") or strong.
_LIST_MEMBER = re.compile(r'[ \t]*(\*|(?:W/)?"[\x21\x23-\x7e\x80-\xff]*")?[ \t]*(?:,|\Z)')


def entity_tags(header: str) -> list[str] | None:
    """An ``If-None-Match`` value's members (``*`` or entity tags, as written), or None when it
    is not a list of them.

    >>> entity_tags('"a", W/"b",, *')
    ['"a"', 'W/"b"', '*']
    >>> entity_tags('xyz"a"') is None
    True
    """
    tags, position = [], 0
    while position < len(header):
        member = _LIST_MEMBER.match(header, position)
        if member is None:
            return None
        if member[1]:
            tags.append(member[1])
        position = member.end()
    return tags


def not_modified(sha: str, if_none_match: str) -> bool:
    """Whether an ``If-None-Match`` value names this artifact (the client has it already): one
    of its entity tags is ``"sha"`` (weakly compared, as RFC 9110 says for this header), or it
    is ``*`` (any file that exists).

    >>> not_modified("ab", 'W/"ab"'), not_modified("ab", '"cd", "ab"'), not_modified("ab", "*")
    (True, True, True)
    >>> not_modified("ab", '"xaby"'), not_modified("ab", 'ab'), not_modified("ab", '"ab')
    (False, False, False)
    """
    tags = entity_tags(if_none_match) or []
    return "*" in tags or f'"{sha}"' in (tag.removeprefix("W/") for tag in tags)


DOWNLOAD_ROUTE = SimpleNamespace(path="/v1/tokenizers/{name}/versions/{ref}/tokenizer.json")
_NUMBERED_DOWNLOAD = re.compile(r"/v1/tokenizers/([A-Za-z0-9][A-Za-z0-9._-]{0,63})/versions/([0-9]+)/tokenizer\.json")


class CachedDownloads:
    """Answers a numbered version's tokenizer.json that is already in memory (an immutable file)
    before routing: the hot path of trainers revalidating touches neither the database nor
    FastAPI's machinery. Anything else goes on to the app."""

    def __init__(self, app: ASGIApp, cache: ArtifactCache) -> None:
        self.app, self.cache = app, cache
        self._headers: dict[str, list[tuple[bytes, bytes]]] = {}  # a sha's ETag and caching, made once

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        match = (
            _NUMBERED_DOWNLOAD.fullmatch(path)
            if path.endswith("/tokenizer.json") and scope["type"] == "http" and scope["method"] == "GET"
            else None
        )
        sha = self.cache.shas.get((match[1], int(match[2]))) if match else None
        body = self.cache.blobs.get(sha) if sha is not None else None  # once: a request's thread may let it go
        if sha is None or body is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = DOWNLOAD_ROUTE
        if (headers := self._headers.get(sha)) is None:
            headers = self._headers[sha] = [
                (k.lower().encode(), v.encode()) for k, v in download_headers(sha, immutable=True).items()
            ]
        asked = b",".join(value for name, value in scope["headers"] if name == b"if-none-match")
        if not_modified(sha, asked.decode("latin-1")):
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": headers
                + [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
