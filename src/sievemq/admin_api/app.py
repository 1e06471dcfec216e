"""The FastAPI app factory: RabbitMQ's management API, SieveMQ's stream API, probes.

``create_app(facade)`` serves everything; without a facade (tests of the probes alone) only
``/healthz`` and ``/readyz`` exist. OpenAPI at ``/openapi.json``, interactive docs at ``/docs``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from sievemq.admin_api import errors, metrics, quorum_members, rabbit, replicas, streams
from sievemq.admin_api.bodies import MAX_BODY_BYTES
from sievemq.admin_api.paths import RawPathMiddleware
from sievemq.gateway.admin.facade import BrokerFacade

STATIC = Path(__file__).resolve().parent / "static"


def create_app(
    is_ready: Callable[[], bool] | None = None, facade: BrokerFacade | None = None
) -> FastAPI:
    """Build the admin app; ``is_ready`` tells /readyz whether the AMQP side accepts clients."""
    app = FastAPI(
        title="SieveMQ admin",
        version=facade.version if facade is not None else "0.1.0",
        description="RabbitMQ's management HTTP API for SieveMQ's streams, plus the stream "
        "API RabbitMQ lacks. HTTP basic authentication with the broker's users.",
    )
    app.state.facade = facade
    app.state.is_ready = is_ready
    app.state.heavy = asyncio.Lock()  # one big answer built at a time (slicing.heavy)
    errors.install(app)

    @app.get("/healthz", tags=["probes"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["probes"])
    async def readyz(response: Response) -> dict[str, str]:
        if is_ready is not None and not is_ready():
            response.status_code = 503
            return {"status": "starting"}
        return {"status": "ready"}

    if facade is not None:

        @app.get("/", include_in_schema=False)
        async def dashboard() -> FileResponse:
            """The web dashboard (plain HTML/CSS/JS under ./static, no build step)."""
            return FileResponse(STATIC / "index.html")

        @app.get("/favicon.ico", include_in_schema=False)
        async def favicon() -> FileResponse:
            """The dashboard's icon where every browser asks for it (an SVG: no 404)."""
            return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")

        app.mount("/static", StaticFiles(directory=STATIC), name="static")
        app.include_router(rabbit.router)
        app.include_router(streams.router)
        app.include_router(replicas.router)
        app.include_router(quorum_members.router)
        app.include_router(metrics.router)

    @app.middleware("http")
    async def body_limit(request: Request, call_next: Callable[..., object]) -> Response:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            return Response(
                b'{"error":"bad_request","reason":"request body too large"}',
                status_code=413,
                media_type="application/json",
            )
        response: Response = await call_next(request)  # type: ignore[misc]
        return response

    app.add_middleware(RawPathMiddleware)
    return app
