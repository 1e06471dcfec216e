"""The vhost and user ``max-connections`` limits count stream-protocol connections with the
AMQP 0-9-1 ones; over a limit a stream client's Open is answered 12 (RabbitMQ's stream plugin
refusal) and the server closes with the limit's text. A raw stream client reads the frames."""

from __future__ import annotations

import struct
import time

import httpx
import pika
import pika.exceptions
import pytest

from sievemq.streamproto import wire
from sievemq.testing import ServerProcess
from sievemq.testing.admin_client import q
from sievemq.testing.stream_client import RawStreamClient

pytestmark = pytest.mark.timeout(60)


def _amqp(server: ServerProcess, vhost: str, user: str, pw: str) -> pika.BlockingConnection:
    url = f"amqp://{user}:{pw}@{server.host}:{server.amqp_port}/{q(vhost)}"
    return pika.BlockingConnection(pika.URLParameters(url))


def _refusal(raw: RawStreamClient) -> tuple[int, str]:
    """After an Open answered 12: the server's Close (code, reason)."""
    key, _, body = raw.read_frame()
    assert key == wire.CLOSE
    _corr, code, size = struct.unpack_from(">IHH", body)
    return code, body[8 : 8 + size].decode()


def _stream(server: ServerProcess, vhost: str, user: str, pw: str) -> tuple[RawStreamClient, int]:
    raw = RawStreamClient(server)
    return raw, raw.open(user, pw, vhost)


def test_vhost_max_connections_counts_both_protocols(
    server: ServerProcess, qname: str, http: httpx.Client
) -> None:
    vhost = f"lim-{qname[-8:]}"
    assert http.put(f"/api/vhosts/{vhost}").status_code in (201, 204)
    perms = {"configure": ".*", "write": ".*", "read": ".*"}
    http.put(f"/api/permissions/{vhost}/guest", json=perms)
    limit = http.put(f"/api/vhost-limits/{vhost}/max-connections", json={"value": 2})
    assert limit.status_code == 204
    try:
        amqp = _amqp(server, vhost, "guest", "guest")
        first, code = _stream(server, vhost, "guest", "guest")
        assert code == wire.OK  # one AMQP + one stream connection: at the limit
        refused, code = _stream(server, vhost, "guest", "guest")
        assert code == wire.VIRTUAL_HOST_ACCESS_FAILURE
        assert _refusal(refused) == (
            wire.VIRTUAL_HOST_ACCESS_FAILURE,
            f"access to vhost '{vhost}' refused for user 'guest': connection limit (2) is reached",
        )
        refused.close()
        # AMQP sees the stream connection too: 530 with RabbitMQ's text
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as amqp_refused:
            _amqp(server, vhost, "guest", "guest")
        assert "connection limit (2) is reached" in str(amqp_refused.value)
        # other vhosts are not limited
        other, code = _stream(server, "/", "guest", "guest")
        assert code == wire.OK
        other.close()
        # a stream connection that goes frees its slot
        first.close()
        deadline = time.monotonic() + 15  # however long the server takes to see it go
        while True:
            again, code = _stream(server, vhost, "guest", "guest")
            again.close()
            if code == wire.OK:
                break
            assert time.monotonic() < deadline, "the freed slot was never reused"
            time.sleep(0.02)
        amqp.close()
    finally:
        http.delete(f"/api/vhosts/{vhost}")


def test_user_max_connections_counts_both_protocols(
    server: ServerProcess, qname: str, http: httpx.Client
) -> None:
    user = f"lim-{qname[-8:]}"
    http.put(f"/api/users/{user}", json={"password": "pw", "tags": ""})
    perms = {"configure": ".*", "write": ".*", "read": ".*"}
    http.put(f"/api/permissions/%2F/{user}", json=perms)
    assert (
        http.put(f"/api/user-limits/{user}/max-connections", json={"value": 1}).status_code == 204
    )
    try:
        first, code = _stream(server, "/", user, "pw")
        assert code == wire.OK
        refused, code = _stream(server, "/", user, "pw")
        assert code == wire.VIRTUAL_HOST_ACCESS_FAILURE
        assert _refusal(refused) == (
            wire.VIRTUAL_HOST_ACCESS_FAILURE,
            f"connection refused for user '{user}': user connection limit (1) is reached",
        )
        refused.close()
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as amqp_refused:
            _amqp(server, "/", user, "pw")
        assert "user connection limit (1) is reached" in str(amqp_refused.value)
        guest, code = _stream(server, "/", "guest", "guest")  # other users are not limited
        assert code == wire.OK
        guest.close()
        first.close()
    finally:
        http.delete(f"/api/users/{user}")
