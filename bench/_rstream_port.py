"""pytest plugin for `bench.rstream_suite`: rstream's suite declares `--rmq-port` without a
type, so a port given on the command line arrives as a string; make it an int."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    port = getattr(config.option, "rmq_port", None)
    if isinstance(port, str):
        config.option.rmq_port = int(port)
