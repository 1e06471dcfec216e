"""`sievemq serve` works with the broker's runtime alone, as `make run` installs it.

`make run` syncs without the dev group and without the `spark` extra, so the serve path must
never import them. The server here runs with every such distribution made unimportable (a
`sitecustomize` on PYTHONPATH puts a blocker first in ``sys.meta_path``) and is then used as a
newcomer would: the README's stream example over AMQP, and the admin pages.
"""

from __future__ import annotations

import re
import tomllib
import urllib.request
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

import pika
import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"

BLOCKER = '''
import importlib.abc
import sys

BLOCKED = frozenset({names!r})


class NotInTheRuntime(importlib.abc.MetaPathFinder):
    """Refuse what `make run` does not install."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"{{fullname}} is not a runtime dependency")
        return None


sys.meta_path.insert(0, NotInTheRuntime())
'''


def _normalized(requirement: str) -> str:
    name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def not_in_the_runtime() -> set[str]:
    """Top-level modules of the dev group and the extras (not also a runtime dependency's)."""
    project = tomllib.loads(PYPROJECT.read_text())
    runtime = {_normalized(r) for r in project["project"]["dependencies"]}
    optional = [r for group in project["project"]["optional-dependencies"].values() for r in group]
    dev = project["dependency-groups"]["dev"]
    others = {_normalized(r) for r in optional + dev} - runtime
    return {
        module
        for module, dists in packages_distributions().items()
        if {_normalized(d) for d in dists} <= others
    }


def test_the_blocked_set_holds_the_dev_and_spark_packages() -> None:
    blocked = not_in_the_runtime()
    assert {"pyspark", "pyarrow", "deltalake", "pytest", "pika", "mypy", "playwright"} <= blocked
    assert not {"fastapi", "uvicorn", "pamqp", "aiormq", "sievemq"} & blocked


@pytest.fixture
def runtime_only_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerProcess]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(names=sorted(not_in_the_runtime())))
    monkeypatch.setenv("PYTHONPATH", str(site))
    with ServerProcess(tmp_path / "data") as proc:
        yield proc


def test_serve_starts_and_serves_without_dev_or_spark_packages(
    runtime_only_server: ServerProcess,
) -> None:
    conn = connect(runtime_only_server)
    ch = conn.channel()
    ch.queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for region in ["emea", "amer", "emea"]:
        ch.basic_publish(
            "",
            "events",
            region.encode(),
            pika.BasicProperties(headers={"x-stream-filter-value": region}),
        )
    ch.basic_qos(prefetch_count=10)
    received: list[bytes] = []

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        received.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(received) == 2:
            ch.stop_consuming()

    ch.basic_consume(
        "events", on_message, arguments={"x-stream-offset": "first", "x-stream-filter": "emea"}
    )
    ch.start_consuming()
    conn.close()
    assert received == [b"emea", b"emea"]

    password = urllib.request.HTTPPasswordMgrWithDefaultRealm()
    password.add_password(None, runtime_only_server.admin_url, "guest", "guest")
    opener = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(password))
    for page in ("/", "/api/overview", "/api/streams", "/metrics", "/openapi.json", "/readyz"):
        with opener.open(runtime_only_server.admin_url + page, timeout=30) as response:
            assert response.status == 200, page
    assert "is not a runtime dependency" not in runtime_only_server.stderr()
