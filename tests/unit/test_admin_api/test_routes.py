"""Every admin route answers its own path: a route listed too late behind a broader one
(``/api/users/{username}`` before ``/api/users/without-permissions``) would never be reached.

The app is built without a broker: the caller and facade dependencies are replaced by one that
names the route the request reached, so no handler runs.
"""

from __future__ import annotations

import re
import types
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from sievemq.admin_api import auth, slicing
from sievemq.admin_api.app import create_app

# routes without any dependency: nothing to stop them, they answer as they are
NO_DEPENDENCY = {("GET", "/api/auth"), ("GET", "/healthz"), ("GET", "/readyz")}
REACHED = 299


class _Reached(Exception):
    def __init__(self, path: str, methods: set[str]) -> None:
        super().__init__(path)
        self.path = path
        self.methods = methods


async def _stop_here(request: Request) -> None:
    route = request.scope["route"]
    raise _Reached(route.path, set(route.methods))


def _probed_app() -> FastAPI:
    app = create_app(facade=types.SimpleNamespace(version="test"))  # type: ignore[arg-type]
    for dependency in (
        auth.user,
        auth.monitor,
        auth.policymaker,
        auth.admin,
        auth.facade_of,
        slicing.heavy,
    ):
        app.dependency_overrides[dependency] = _stop_here

    @app.exception_handler(_Reached)
    async def reached(request: Request, exc: _Reached) -> JSONResponse:
        return JSONResponse({"path": exc.path, "methods": sorted(exc.methods)}, REACHED)

    return app


async def test_every_documented_route_answers_its_own_path() -> None:
    app = _probed_app()
    paths: dict[str, Any] = app.openapi()["paths"]
    checked = 0
    # httpx's own ASGI transport: starlette's TestClient warns that its httpx use is deprecated
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
        for path, operations in paths.items():
            concrete = re.sub(r"\{[^}]+\}", "x", path)
            for method in operations:
                answer = await client.request(method.upper(), concrete)
                if (method.upper(), path) in NO_DEPENDENCY:
                    assert answer.status_code == 200, path
                    continue
                assert answer.status_code == REACHED, (method, path, answer.text)
                reached = answer.json()
                # a nested router's route knows its path below the router's prefix
                assert path.endswith(reached["path"]), (method, path, reached)
                assert method.upper() in reached["methods"], (method, path, reached)
                checked += 1
    assert checked > 100  # RabbitMQ's management API, the stream API, Prometheus
