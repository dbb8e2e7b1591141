"""One shape for every refusal the registry and the ingest server answer, whatever refused it:
``{"error_code": ..., "message": ..., "reasons": [...]}`` (the registry's own refusals, a missing
token, a body over the limit, a parameter FastAPI could not read, an unknown path).

>>> error_body("too_large", ["2 bytes", "the limit is 1"])["message"]
'too_large: 2 bytes; the limit is 1'
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

# The code of a refusal that carries only an HTTP status.
STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
    503: "unavailable",
}


def error_body(code: str, reasons: list[str]) -> dict[str, Any]:
    """The JSON of a refusal."""
    return {"error_code": code, "message": f"{code}: " + "; ".join(reasons), "reasons": reasons}


def install_error_shape(app: FastAPI) -> None:
    """Answer FastAPI's and Starlette's own refusals in the one shape."""

    @app.exception_handler(HTTPException)
    async def http_refusal(request: Request, exc: HTTPException) -> JSONResponse:
        code = STATUS_CODES.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, [str(exc.detail)]), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        reasons = [f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors()]
        return JSONResponse(error_body("invalid_request", reasons), status_code=422)
