"""registry/api/deps.py: the writer a bearer token makes, and a body refused past its limit
as it streams in, on requests built here (no server)."""

import asyncio
from types import SimpleNamespace

import pytest
from fastapi import HTTPException
from starlette.requests import Request

from registry.api.deps import read_body, require_writer

TOKEN = "t" * 32


def request(headers: dict[str, str], token: str | None = TOKEN, chunks: tuple[bytes, ...] = ()) -> Request:
    app = SimpleNamespace(state=SimpleNamespace(settings=SimpleNamespace(token=token)))
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.request", "body": b"", "more_body": False}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "app": app,
    }
    return Request(scope, receive)


@pytest.mark.parametrize(
    "authorization", [None, "", f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer"]
)
def test_a_write_without_the_bearer_token_is_refused_401(authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    with pytest.raises(HTTPException) as refused:
        require_writer(request(headers))
    assert refused.value.status_code == 401 and refused.value.headers == {"WWW-Authenticate": "Bearer"}


def test_the_token_makes_a_writer_and_insecure_dev_needs_none():
    assert require_writer(request({"Authorization": f"bearer {TOKEN}"})) == "token"
    assert require_writer(request({}, token=None)) == "insecure-dev"


def test_a_body_is_refused_413_by_its_declared_length_or_once_it_streams_past_the_limit():
    with pytest.raises(HTTPException) as declared:
        asyncio.run(read_body(request({"Content-Length": "11"}, chunks=(b"x" * 11,)), 10))
    assert declared.value.status_code == 413 and declared.value.detail == "the upload is 11 bytes; the limit is 10"
    with pytest.raises(HTTPException) as streamed:
        asyncio.run(read_body(request({}, chunks=(b"x" * 6, b"x" * 6)), 10))
    assert streamed.value.status_code == 413 and "more than 10 bytes" in streamed.value.detail
    assert asyncio.run(read_body(request({}, chunks=(b"ab", b"cd")), 4)) == b"abcd"
