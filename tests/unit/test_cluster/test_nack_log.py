"""The forwarded-publish nack warning: one line per queue every few seconds, with a count."""

from __future__ import annotations

import logging

import pytest

from sievemq.cluster.forwarding import NackLog


def test_one_line_per_queue_per_interval_with_the_count(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    nacks = NackLog(every_s=5.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="sievemq.cluster"):
        assert nacks.nacked("/", "q", "a", 1, "node 'a' is not running")
        for _ in range(1000):  # a publisher nacked at once, again and again
            now[0] += 0.001
            assert not nacks.nacked("/", "q", "a", 2, "node 'a' is not running")
        assert nacks.nacked("/", "other", "a", 3, "lost")  # another queue has its own line
        now[0] += 5.0
        assert nacks.nacked("/", "q", "a", 1, "node 'a' is not running")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[0] == (
        "publishes to queue 'q' in vhost '/' forwarded to node 'a' are nacked: "
        "node 'a' is not running (1 now)"
    )
    assert "'other'" in lines[1] and "(3 now)" in lines[1]
    assert lines[2].endswith("(1 now, 2000 more since the last such line)")
