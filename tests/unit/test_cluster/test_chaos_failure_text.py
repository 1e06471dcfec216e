"""The chaos workload's Stream-protocol publishers keep which step failed and when, so a
run's artifacts can tell a slow locator node (``start``) from a leader that does not
confirm (``send``)."""

from __future__ import annotations

import re

from tests.chaos.workload import failure


def test_failure_names_the_step_its_time_and_the_error() -> None:
    text = failure("start", 10.04, TimeoutError())
    assert re.fullmatch(r"start at \d\d:\d\d:\d\d\.\d{3}Z after 10\.0 s: TimeoutError: ", text)


def test_failure_is_kept_short() -> None:
    text = failure("first send", 0.5, ValueError("x" * 500))
    assert text.startswith("first send at ")
    assert "ValueError: xxx" in text
    assert len(text) == 200
