"""The registry's HTTP API: assembles the routers, maps refusals to JSON and counts requests.

Run it with ``tokmaint registry serve`` (uvicorn). At start it migrates the database to the
newest schema; OpenAPI docs are at ``/docs``.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from registry.api.downloads import ArtifactCache, CachedDownloads
from registry.api.errors import error_body, install_error_shape
from registry.api.in_flight import NO_TELEMETRY, InFlight, InFlightLimit, Limits
from registry.api.routes import hub, pages
from registry.api.routes.tokenizers import router
from registry.api.watches import LatestNumbers
from registry.artifacts import LocalArtifactStore
from registry.config import RegistrySettings
from registry.db import make_engine, migrate
from registry.store import Registry, RegistryError


@dataclass
class Metrics:
    """The Prometheus metrics of one app (own registry, so several apps can live in one process)."""

    registry: CollectorRegistry
    requests: Counter
    latency: Histogram
    publishes: Counter
    refusals: Counter

    @classmethod
    def create(cls) -> "Metrics":
        reg = CollectorRegistry()
        return cls(
            registry=reg,
            requests=Counter(
                "tokmaint_registry_requests_total", "HTTP requests", ["method", "route", "status"], registry=reg
            ),
            latency=Histogram(
                "tokmaint_registry_request_seconds", "HTTP request latency", ["method", "route"], registry=reg
            ),
            publishes=Counter("tokmaint_registry_publishes_total", "versions published", ["kind"], registry=reg),
            refusals=Counter("tokmaint_registry_refusals_total", "refused requests", ["code"], registry=reg),
        )


class RequestMetrics:
    """Counts and times every request by route template (a plain ASGI middleware: the hot path
    of revalidations stays cheap)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics
        # (method, route, status) -> its latency and count children: as many as routes x statuses.
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            template = getattr(scope.get("route"), "path", "unmatched")
            key = (scope["method"], template, status)
            if (children := self._children.get(key)) is None:  # labels() costs more than the rest together
                children = self._children[key] = (
                    self.metrics.latency.labels(key[0], template),
                    self.metrics.requests.labels(key[0], template, str(status)),
                )
            children[0].observe(time.perf_counter() - started)
            children[1].inc()


def create_app(settings: RegistrySettings) -> FastAPI:
    """The app for these settings (the database is migrated when it starts)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        migrate(settings.db)
        engine = make_engine(settings.db)
        app.state.registry = Registry(
            engine,
            LocalArtifactStore(settings.artifacts),
            check_process=settings.check_process,
            cache_tokens=settings.cache_tokens,
        )
        app.state.latest_numbers = LatestNumbers(app.state.registry.lineages)
        yield
        app.state.registry.close()
        engine.dispose()

    app = FastAPI(
        title="tokmaint registry",
        version="1",
        lifespan=lifespan,
        telemetry=NO_TELEMETRY,
        description="Immutable numbered tokenizer versions per lineage, aliases, diffs and watch; the "
        "Hugging Face Hub protocol (read-only) at the root.",
    )
    app.state.settings = settings
    app.state.cache = ArtifactCache(max_bytes=int(settings.cache_mb * 1024 * 1024))
    app.state.metrics = Metrics.create()
    app.state.hub = hub.HubFiles(model_max_length=settings.model_max_length)
    app.state.in_flight = InFlight(
        Limits(
            requests=settings.max_in_flight,
            per_client=settings.max_in_flight_per_client,
            watches=settings.max_watches,
            watches_per_client=settings.max_watches_per_client,
            send_timeout=settings.send_timeout,
            receive_timeout=settings.receive_timeout,
            min_upload_rate=settings.min_upload_kib_per_second * 1024,
        ),
        write_token=settings.token,
    )
    app.include_router(router)
    app.include_router(pages.router)
    app.include_router(hub.router)  # last: its paths start with any lineage's name

    install_error_shape(app)

    @app.exception_handler(RegistryError)
    async def refused(request: Request, exc: RegistryError) -> JSONResponse:
        app.state.metrics.refusals.labels(exc.code).inc()
        return JSONResponse(status_code=exc.status, content=error_body(exc.code, exc.reasons))

    # RequestMetrics, added last, is the outermost: cached downloads and refusals of overload are counted too.
    app.add_middleware(CachedDownloads, cache=app.state.cache)
    app.add_middleware(InFlightLimit, state=app.state.in_flight)
    app.add_middleware(RequestMetrics, metrics=app.state.metrics)

    @app.get("/healthz", tags=["operations"])
    def healthz() -> dict[str, Any]:
        """Liveness: 200 while the server and its database answer, saturated or not (restarting a
        busy server helps no one); ``saturated`` once every request place, or every watch, is taken."""
        app.state.registry.lineages()  # the database answers
        return app.state.in_flight.health()

    @app.get("/readyz", tags=["operations"])
    def readyz() -> JSONResponse:
        """Readiness: as ``/healthz``, but 503 while saturated (a replica taken out of its Service
        until places free up)."""
        app.state.registry.lineages()
        health = app.state.in_flight.health()
        return JSONResponse(health, status_code=503 if health["saturated"] else 200)

    @app.get("/metrics", tags=["operations"])
    def metrics() -> Response:
        return Response(generate_latest(app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
