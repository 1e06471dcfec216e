"""The same stream scenario with every supported client library.

Declare a durable stream, publish with confirms, consume with prefetch and every kind of
x-stream-offset; see client_scenario.py for the steps and what is checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sievemq.testing import ServerProcess

from ..node_scenarios import run_node
from .client_drivers import AioPikaDriver, AiormqDriver, KombuDriver, PikaDriver
from .client_scenario import (
    N_A,
    N_TOTAL,
    PREFETCH,
    QUIET,
    Delivery,
    ScenarioResult,
    check_scenario,
    message_spec,
    run_scenario,
)

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "driver_cls",
    [PikaDriver, AioPikaDriver, AiormqDriver, KombuDriver],
    ids=["pika", "aio-pika", "aiormq", "kombu"],
)
def test_scenario_python_client(server: ServerProcess, qname: str, driver_cls: type) -> None:
    exchange = f"{qname}.x"
    result = run_scenario(driver_cls(server.url), exchange, qname)
    check_scenario(result, exchange)


def test_scenario_amqplib(server: ServerProcess, qname: str, node_modules: Path) -> None:
    exchange = f"{qname}.x"
    cfg = {
        "url": server.url,
        "exchange": exchange,
        "queue": qname,
        "messages": [message_spec(i) for i in range(N_TOTAL + 1)],
        "nA": N_A,
        "nTotal": N_TOTAL,
        "prefetch": PREFETCH,
        "quietMs": int(QUIET * 1000),
    }
    out = run_node("scenario.js", cfg)
    results = {
        name: [Delivery(**d) for d in deliveries] for name, deliveries in out["results"].items()
    }
    check_scenario(ScenarioResult(out["splitTs"], results), exchange)
