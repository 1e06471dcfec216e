"""RabbitMQ's error answers: ``{"error": type, "reason": text}`` with its status codes."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from sievemq.gateway.admin.views import AMQPError, NotFound

REALM = 'Basic realm="RabbitMQ Management"'
NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


class ApiError(Exception):
    """An answer other than 2xx; ``body`` None sends an empty body."""

    def __init__(
        self,
        status: int,
        error: str | None,
        reason: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(reason or error or str(status))
        self.status = status
        self.body: dict[str, Any] | None = (
            None if error is None else {"error": error, "reason": reason or "", **(extra or {})}
        )
        self.headers = headers or {}


def bad_request(reason: str) -> ApiError:
    return ApiError(400, "bad_request", reason)


def not_authorised(reason: str) -> ApiError:
    """RabbitMQ answers a missing tag or permission with 401 (not 403)."""
    return ApiError(401, "not_authorised", reason)


def not_found() -> ApiError:
    return ApiError(404, NOT_FOUND["error"], NOT_FOUND["reason"])


def install(app: FastAPI) -> None:
    """Map every refusal to RabbitMQ's shape."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        if exc.body is None:
            return Response(status_code=exc.status, headers=exc.headers)
        return JSONResponse(exc.body, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(AMQPError)
    async def amqp_error(request: Request, exc: AMQPError) -> Response:
        if isinstance(exc, NotFound):
            return JSONResponse(NOT_FOUND, status_code=404)
        if exc.reply_code == 541:  # not made durable (a cluster's etcd away): not the client's
            return JSONResponse(
                {"error": "internal_error", "reason": exc.explanation}, status_code=500
            )
        return JSONResponse({"error": "bad_request", "reason": exc.explanation}, status_code=400)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse({"error": "bad_request", "reason": "not_json"}, status_code=400)
        parts = []
        for e in errors:
            where = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
            parts.append(f"{where}: {e.get('msg', 'invalid')}" if where else e.get("msg", ""))
        return JSONResponse(
            {"error": "bad_request", "reason": "; ".join(parts) or "invalid request"},
            status_code=400,
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            return JSONResponse(NOT_FOUND, status_code=404)
        if exc.status_code == 405:
            return JSONResponse(
                {"error": "Method Not Allowed", "reason": "Method Not Allowed"},
                status_code=405,
                headers=dict(exc.headers or {}),
            )
        return JSONResponse(
            {"error": "bad_request", "reason": str(exc.detail)}, status_code=exc.status_code
        )
