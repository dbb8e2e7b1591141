"""At most ``limit`` requests in flight; one more is refused at once with 503 and
``Retry-After`` (``{error_code: "overloaded", ...}``) instead of waiting in a queue that grows
without bound: past its capacity a server keeps answering in time the requests it takes, and a
client knows to come back. Health checks, metrics and watches (which wait, and hold no worker)
are not counted.

    app.add_middleware(InFlightLimit, limit=64)
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from starlette.types import ASGIApp, Receive, Scope, Send

from registry.api.errors import error_body

UNCOUNTED = ("/healthz", "/metrics")
SHED_ROUTE = SimpleNamespace(path="overloaded")  # the route label a refused request is counted under


def counted(path: str) -> bool:
    """Whether a request to ``path`` takes one of the places.

    >>> counted("/v1/tokenizers/git/versions/latest"), counted("/healthz"), counted("/v1/tokenizers/git/watch")
    (True, False, False)
    """
    return path not in UNCOUNTED and not path.endswith("/watch")


class InFlightLimit:
    """A plain ASGI middleware: the count lives on the event loop's one thread."""

    def __init__(self, app: ASGIApp, *, limit: int, retry_after: int = 1) -> None:
        self.app, self.limit, self.retry_after = app, limit, retry_after
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not counted(scope["path"]):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            scope["route"] = SHED_ROUTE
            body = json.dumps(error_body("overloaded", [
                f"{self.in_flight} requests are in flight, the most this server takes at once; "
                f"try again in {self.retry_after} s"])).encode()
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(self.retry_after).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
