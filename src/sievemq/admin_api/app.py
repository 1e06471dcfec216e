"""The FastAPI app factory: for now only liveness and readiness probes."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Response


def create_app(is_ready: Callable[[], bool] | None = None) -> FastAPI:
    """Build the admin app; ``is_ready`` tells /readyz whether the AMQP side accepts clients."""
    app = FastAPI(title="SieveMQ admin", version="0.1.0")

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz(response: Response) -> dict[str, str]:
        if is_ready is not None and not is_ready():
            response.status_code = 503
            return {"status": "starting"}
        return {"status": "ready"}

    return app
