"""docker-compose.yml and the Dockerfile are checked here, since Docker cannot run on CI.

They must start the real command line with flags that exist, publish the default ports and
point the health check at a route the admin app serves.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import yaml

from sievemq.admin_api import create_app
from sievemq.cli import _build_parser
from sievemq.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_gateway_service_runs_a_valid_serve_command() -> None:
    gateway = _compose()["services"]["gateway"]
    command = gateway["command"]
    assert command[:2] == ["sievemq", "serve"]
    args = _build_parser().parse_args(command[1:])
    assert args.command == "serve"


def test_gateway_service_publishes_the_default_ports() -> None:
    defaults = Settings()
    gateway = _compose()["services"]["gateway"]
    published = {int(p.split(":")[1]) for p in gateway["ports"]}
    assert published == {defaults.amqp_port, defaults.admin_port}


async def test_healthcheck_route_is_served_by_the_admin_app() -> None:
    gateway = _compose()["services"]["gateway"]
    url = " ".join(gateway["healthcheck"]["test"])
    path = re.search(r"http://[^/]+(/[a-z]+)", url)
    assert path is not None
    # httpx's own ASGI transport: starlette's TestClient warns that its httpx use is deprecated
    transport = httpx.ASGITransport(app=create_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
        response = await client.get(path.group(1))
    assert response.status_code == 200


def test_dockerfile_cmd_is_a_valid_serve_command() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.MULTILINE)
    assert cmd is not None
    words = yaml.safe_load(cmd.group(1))
    assert _build_parser().parse_args(words[1:]).command == "serve"
