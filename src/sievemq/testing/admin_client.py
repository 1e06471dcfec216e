"""The admin API of a gateway under test through httpx (a test dependency).

``client(server)`` is an ``httpx.Client`` on the admin port, logged in (guest by default);
``q(name)`` quotes a vhost or queue name as one path segment, as RabbitMQ's clients do;
``streams_cli(server, ...)`` and ``queues_cli(server, ...)`` run `sievemq streams ...` and
`sievemq queues ...` against it, as a user does.
"""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import quote

import httpx

from sievemq.testing.gateway import RunningGateway
from sievemq.testing.process import ServerProcess

__all__ = ["client", "q", "queues_cli", "streams_cli"]


def client(
    server: ServerProcess | RunningGateway, user: str = "guest", password: str = "guest"
) -> httpx.Client:
    """A blocking client of ``server``'s admin API as ``user`` (close it, or ``with`` it)."""
    return httpx.Client(base_url=server.admin_url, auth=(user, password), timeout=10.0)


def q(name: str) -> str:
    """A path segment as RabbitMQ's clients send it (``/`` -> ``%2F``)."""
    return quote(name, safe="")


def streams_cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`sievemq streams ARGS` against ``server``'s admin API (as guest), in a process of its
    own as a user runs it: its exit status and output."""
    return _cli(server, "streams", *args)


def queues_cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`sievemq queues ARGS` (a quorum queue's members) against ``server``, as
    ``streams_cli``."""
    return _cli(server, "queues", *args)


def _cli(server: ServerProcess, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    url = server.admin_url.replace("http://", "http://guest:guest@")
    return subprocess.run(
        [sys.executable, "-m", "sievemq", tool, *args, "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
