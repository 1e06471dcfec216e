"""Single active consumer hand-over with the Node stream client (rabbitmq-stream-js-client,
from tests/integration/data/node's lock file): two consumers in one group, the active one stops,
the waiting one takes over and gets the rest with no gap."""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.testing import ServerProcess

from ..node_scenarios import run_node

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize(
    ("mode", "first", "stop_after"),
    [
        ("unsubscribe", 20, 20),  # one shared connection, client.closeConsumer()
        ("close", 20, 20),  # its own client, client.close()
        ("unsubscribe", 3000, 50),  # stopped while most of the backlog is still unread
        ("close", 3000, 50),
    ],
    ids=["unsubscribe", "close", "unsubscribe-mid-backlog", "close-mid-backlog"],
)
def test_waiting_consumer_takes_over_where_the_active_one_stored(
    server: ServerProcess,
    qname: str,
    node_modules: Path,
    mode: str,
    first: int,
    stop_after: int,
) -> None:
    second = 100
    cfg = {
        "port": server.stream_port,
        "stream": qname,
        "mode": mode,
        "first": first,
        "stopAfter": stop_after,
        "second": second,
    }
    out = run_node("stream_sac.js", cfg, timeout=80)
    total = first + second
    got_first: list[int] = out["first"]
    got_second: list[int] = out["second"]
    stored: int = out["stored"]
    # while the first one was active the waiting one got nothing
    assert out["secondBefore"] == 0
    assert got_first == list(range(len(got_first)))
    assert stored >= stop_after - 1
    # the second one starts right after the offset the first one stored: no gap, and it gets
    # everything after it, including what was published after the hand-over
    assert got_second == list(range(stored + 1, total))
    assert stored + 1 <= len(got_first)
    # the client's listener ran once for the first one's activation; the second one was told
    # it waits (ConsumerUpdate(active=0): this client runs its listener for it too) and then
    # activated
    assert out["updates"].count("c1") == 1
    assert out["updates"][-1] == "c2"
