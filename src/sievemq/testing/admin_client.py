"""Helpers for the admin API tests: an httpx client on a running server's admin port."""

from __future__ import annotations

from urllib.parse import quote

import httpx

from sievemq.testing import ServerProcess


def client(server: ServerProcess, user: str = "guest", password: str = "guest") -> httpx.Client:
    return httpx.Client(base_url=server.admin_url, auth=(user, password), timeout=10.0)


def q(name: str) -> str:
    """A path segment as RabbitMQ's clients send it (``/`` -> ``%2F``)."""
    return quote(name, safe="")
