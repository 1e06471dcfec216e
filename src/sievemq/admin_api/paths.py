"""Keep ``%2F`` inside one path segment: RabbitMQ's clients put vhost ``/`` as ``%2F``.

The server decodes the path before routing, which would split ``/api/queues/%2F/s1`` into
four segments; this middleware routes on the raw path instead, and the handlers decode each
path parameter with ``unquote`` (``name`` below).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send


class RawPathMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            if raw:
                path = raw.decode("latin-1").split("?", 1)[0]
                scope = dict(scope, path=path, headers=_json_content(scope))
        await self.app(scope, receive, send)


def _json_content(scope: Scope) -> list[tuple[bytes, bytes]]:
    """RabbitMQ reads every API body as JSON whatever its content type (curl -d sends
    form encoding): the API's bodies are parsed as JSON here too."""
    headers = list(scope.get("headers", []))
    if not scope["path"].startswith("/api/") or scope.get("method") not in ("PUT", "POST"):
        return headers
    kept = [(k, v) for k, v in headers if k.lower() != b"content-type"]
    return [*kept, (b"content-type", b"application/json")]


def name(value: Any) -> str:
    """A path parameter as the client meant it (``%2F`` -> ``/``)."""
    return unquote(str(value))


def exchange_name(value: Any) -> str:
    """``amq.default`` is the default exchange (``""``) in RabbitMQ's paths."""
    text = name(value)
    return "" if text == "amq.default" else text
