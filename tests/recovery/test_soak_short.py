"""The soak harness (bench/soak.py) in short: about a minute of trials, each ending in a
SIGKILL of the real server mid-load, with every check made after every restart.

The long run is ``python -m bench.soak --minutes 30`` (bench/RESULTS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import soak

pytestmark = pytest.mark.timeout(600)


def test_short_soak_finds_nothing() -> None:
    result = soak.run(
        ["--minutes", "0.5", "--min-trials", "3", "--streams", "2", "--rate", "100", "--seed", "7"]
    )
    assert result["findings"] == [], result
    assert result["trials"] >= 3, result
    assert result["messages_confirmed"] > 100, result
    # every confirmed message was found stored, and more were read than confirmed only if
    # some unconfirmed ones were stored too (never fewer)
    assert result["messages_stored"] >= result["messages_confirmed"]
    assert result["consumer_deliveries"] > result["messages_confirmed"]


def test_the_checks_notice_what_they_look_for(tmp_path: Path) -> None:
    """The checker itself: a torn body, a gap in a named consumer and a filtered consumer
    given a non-match are findings (so an empty list above means something)."""
    body = soak.encode_body("s", 12)
    assert soak.decode_body(body) == ("s", 12, soak.color_of(12))
    for broken in (body[:-1], body.replace(b"s|12", b"s|13"), body[:5] + b"\x00" + body[6:]):
        with pytest.raises(ValueError):
            soak.decode_body(broken)
    args = soak.parse_args(["--streams", "1", "--fsync", "batch"])
    checker = soak.Soak(args, tmp_path / "data")  # never started
    state = checker.streams[0]
    state.checked_end = 10
    state.colors = {o: soak.color_of(o) for o in range(10)}
    state.named_seen = {0, 1, 2, 4}  # 3 never delivered
    state.filtered_seen = {0, 1}  # 1 is green
    checker.check_named(state)
    assert len(checker.findings) == 2
    assert "gap [3]" in checker.findings[0]
    assert "non-matching [1]" in checker.findings[1]
