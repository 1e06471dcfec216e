"""What the cluster secret opens when another node relays a request for one of its users:
a get, a purge or a browse of a queue, and the stream API's per-stream routes, done as that
user; nothing else."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import Request

from sievemq.admin_api.auth import authenticate
from sievemq.admin_api.errors import ApiError
from sievemq.gateway.admin.views import PEER_HEADER, RELAY_USER_HEADER, Principal

ALICE = Principal(name="alice", tags=["management"], permissions={})


class Peers:
    def is_peer(self, presented: str) -> bool:
        return presented == "s3cret"


class Facade:
    peers = Peers()

    def principal_of(self, username: str) -> Principal | None:
        return ALICE if username == "alice" else None


def request(method: str, path: str, headers: dict[str, str]) -> Request:
    app: Any = SimpleNamespace(state=SimpleNamespace(facade=Facade()))
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "app": app,
    }
    return Request(scope)


def relayed(method: str, path: str, user: str = "alice", secret: str = "s3cret") -> Request:
    return request(method, path, {PEER_HEADER: secret, RELAY_USER_HEADER: user})


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/queues/%2F/orders/get"),
        ("DELETE", "/api/queues/%2F/orders/contents"),
        ("DELETE", "/api/queues/%2F/orders"),
        ("GET", "/api/streams/%2F/events/messages"),
        ("POST", "/api/queues/%2F/events/stream"),
        ("GET", "/api/streams/%2F/events"),
        ("DELETE", "/api/streams/%2F/events"),
        ("GET", "/api/streams/%2F/events/consumers"),
        ("GET", "/api/streams/%2F/events/offsets"),
        ("GET", "/api/streams/%2F/events/subscriptions"),
        ("GET", "/api/streams/%2F/events/filter-advice"),
        ("GET", "/api/streams/%2F/events/consumers/app/offset"),
        ("PUT", "/api/streams/%2F/events/consumers/app/offset"),
        ("DELETE", "/api/streams/%2F/events/consumers/app/offset"),
    ],
)
def test_a_relayed_get_purge_delete_or_browse_is_done_as_its_user(method: str, path: str) -> None:
    req = relayed(method, path)
    assert authenticate(req) is ALICE
    assert req.state.cluster_peer is True  # relayed no further


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/api/exchanges/%2F/orders"),
        ("PUT", "/api/users/alice"),
        ("GET", "/api/queues/%2F/orders/get"),
        ("POST", "/api/queues/%2F/orders/get/more"),
        ("GET", "/api/definitions"),
        ("PUT", "/api/streams/%2F/events"),
        ("GET", "/api/streams"),
        ("GET", "/api/streams/%2F"),
        ("POST", "/api/streams/%2F/events/messages"),
        ("PUT", "/api/streams/%2F/events/consumers/app"),
    ],
)
def test_the_secret_relays_nothing_else(method: str, path: str) -> None:
    with pytest.raises(ApiError) as refused:
        authenticate(relayed(method, path))
    assert refused.value.status == 401


def test_an_unknown_user_or_a_wrong_secret_is_refused() -> None:
    for req in (
        relayed("POST", "/api/queues/%2F/orders/get", user="mallory"),
        relayed("POST", "/api/queues/%2F/orders/get", secret="guess"),
    ):
        with pytest.raises(ApiError) as refused:
            authenticate(req)
        assert refused.value.status == 401


def test_the_user_header_alone_logs_nobody_in() -> None:
    with pytest.raises(ApiError) as refused:
        authenticate(request("POST", "/api/queues/%2F/orders/get", {RELAY_USER_HEADER: "alice"}))
    assert refused.value.status == 401
