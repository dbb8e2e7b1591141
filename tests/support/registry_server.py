"""The write token of the registry servers that tests/registry's ``server`` fixture starts, and
a raw JSON POST to one (what the client library would refuse to send)."""

import secrets

import httpx

TOKEN = secrets.token_hex(16)


def post(server, path, body: bytes, token: str | None = TOKEN):
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    return httpx.post(f"{server}{path}", content=body, headers=headers, timeout=60)
