"""One session-scoped local[2] SparkSession for every Spark test (the JVM start is slow).

Skipped loudly, never silently, when Java is not installed.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sievemq.testing import ServerProcess


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        message = "SPARK TESTS SKIPPED: no Java (install openjdk-17-jre-headless)"
        warnings.warn(message, stacklevel=1)
        pytest.skip(message)
    # Spark starts many Python workers; without cached bytecode each one compiles pyspark again
    # (seconds on a loaded machine) before it can connect back to the JVM
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("sievemq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        # how long a Python worker may take to connect back (default 15 s): the streaming
        # source's runner is a fresh interpreter importing pyspark, slow on a loaded machine
        .config("spark.python.authenticate.socketTimeout", "180s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def metrics(spark: Any) -> Any:
    """The sievemq source registered on the session, with its reader counters."""
    from sievemq.spark import register

    return register(spark, metrics=True)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A real SieveMQ server on its own data directory, checked alive at the end."""
    proc = ServerProcess(tmp_path / "data").start()
    yield proc
    assert proc.running, proc.stderr()
    proc.stop()
