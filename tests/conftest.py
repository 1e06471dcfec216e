"""Suite-wide settings.

Hypothesis: the machines this suite runs on are shared and noisy, so the timing-based checks
(``too_slow`` input generation, per-example ``deadline``) fail for reasons that have nothing
to do with the code; they are off. What every property asserts is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from sievemq.testing.raw import close_leftover_clients

TESTS = Path(__file__).resolve().parent

settings.register_profile("sievemq", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("sievemq")


@pytest.fixture(autouse=True)
def _close_leftover_raw_clients() -> Iterator[None]:
    """Raw clients a test left open are closed after it, not by the garbage collector."""
    yield
    close_leftover_clients()


FOLDER_MARKERS = ("unit", "integration", "recovery", "spark", "browser", "chaos")
# tests/integration/test_<area>/: each area is a marker too (``pytest -m "integration and not
# clients"``); registered in pyproject.toml like the folder markers
AREA_MARKERS = (
    "amqp",
    "streams",
    "classic",
    "stream_protocol",
    "admin_api",
    "cli",
    "clients",
    "runtime",
    "cluster",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by its top folder (tests/unit/... -> ``unit``) and, in
    tests/integration, by its area (tests/integration/test_amqp/... -> ``amqp``)."""
    for item in items:
        parts = item.path.relative_to(TESTS).parts
        if len(parts) > 1 and parts[0] in FOLDER_MARKERS:
            item.add_marker(parts[0])
        if len(parts) > 2 and parts[0] == "integration" and parts[1].startswith("test_"):
            area = parts[1].removeprefix("test_")
            if area in AREA_MARKERS:
                item.add_marker(area)
