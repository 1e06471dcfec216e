"""A real Celery worker against SieveMQ: the worker runs as a subprocess (``celery worker``,
prefork pool, its default gossip/mingle/heartbeat events on), the test process sends tasks by
name and reads their results through the ``rpc://`` backend (reply queues on SieveMQ).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery, chain
from celery.exceptions import TimeoutError as CeleryTimeout

from sievemq.testing import ServerProcess

TASKS = """
import os

from celery import Celery

app = Celery("sievemq_tasks", broker=os.environ["BROKER_URL"], backend="rpc://")
app.conf.broker_connection_retry_on_startup = True


@app.task(name="sievemq_tasks.add")
def add(x, y):
    return x + y


@app.task(name="sievemq_tasks.fail")
def fail(text):
    raise ValueError(text)


@app.task(name="sievemq_tasks.whoami", bind=True)
def whoami(self):
    return {"hostname": self.request.hostname, "delivery_info": self.request.delivery_info}
"""

READY_TIMEOUT_S = 90
RESULT_TIMEOUT_S = 60


class Worker:
    """``celery -A sievemq_tasks worker`` with its output collected."""

    def __init__(self, folder: Path, broker_url: str) -> None:
        (folder / "sievemq_tasks.py").write_text(TASKS)
        env = dict(os.environ, BROKER_URL=broker_url, PYTHONPATH=str(folder))
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "sievemq_tasks", "worker",
             "--loglevel=INFO", "--concurrency=1", "--hostname=w1@sievemq-test"],
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if " ready." in line:
                self.ready.set()
        self.proc.stdout.close()  # EOF: the worker exited

    def output(self) -> str:
        return "\n".join(self.lines[-80:])

    def stop(self) -> int:
        """Warm shutdown (SIGTERM), as a service manager stops a worker."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._pump.join(10)
        return self.proc.returncode


@pytest.fixture
def worker(server: ServerProcess, tmp_path: Path) -> Iterator[Worker]:
    w = Worker(tmp_path, server.url)
    try:
        if not w.ready.wait(READY_TIMEOUT_S):
            pytest.fail(f"the celery worker did not get ready:\n{w.output()}")
        yield w
    finally:
        code = w.stop()
        assert code == 0, f"worker exit status {code}:\n{w.output()}"


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Celery]:
    app = Celery("sievemq_client", broker=server.url, backend="rpc://")
    app.conf.broker_connection_retry_on_startup = True
    yield app
    results = app.backend.result_consumer
    if results._consumer is not None:  # the rpc:// backend's own connection, once used
        results.stop()
    app.close()


def test_task_round_trip_through_the_worker(worker: Worker, client: Celery) -> None:
    result = client.send_task("sievemq_tasks.add", args=(2, 3))
    try:
        assert result.get(timeout=RESULT_TIMEOUT_S) == 5
    except CeleryTimeout:
        pytest.fail(f"no result from the worker:\n{worker.output()}")
    assert result.successful() and result.state == "SUCCESS"
    # the worker logs the success after it sent the result: give its log line a moment
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any(f"{result.id}] succeeded" in line for line in worker.lines):
            break
        time.sleep(0.05)
    assert any(f"{result.id}] succeeded" in line for line in worker.lines), worker.output()


def test_many_tasks_results_come_back_to_their_callers(worker: Worker, client: Celery) -> None:
    results = [client.send_task("sievemq_tasks.add", args=(i, i)) for i in range(20)]
    assert [r.get(timeout=RESULT_TIMEOUT_S) for r in results] == [2 * i for i in range(20)]


def test_task_error_and_chain(worker: Worker, client: Celery) -> None:
    failed = client.send_task("sievemq_tasks.fail", args=("bad input",))
    with pytest.raises(Exception) as info:
        failed.get(timeout=RESULT_TIMEOUT_S)
    assert type(info.value).__name__ == "ValueError" and "bad input" in str(info.value)
    assert failed.state == "FAILURE"

    # the worker publishes the chain's next task itself: 1 + 2, then + 10
    add = client.signature("sievemq_tasks.add")
    result = chain(add.clone(args=(1, 2)), add.clone(args=(10,))).apply_async()
    assert result.get(timeout=RESULT_TIMEOUT_S) == 13

    info_result = client.send_task("sievemq_tasks.whoami").get(timeout=RESULT_TIMEOUT_S)
    assert info_result["hostname"] == "w1@sievemq-test"
    assert info_result["delivery_info"]["routing_key"] == "celery"


def test_worker_answers_remote_control(worker: Worker, client: Celery) -> None:
    """Broadcast (fanout exchange) and reply queues: `celery inspect ping` in code."""
    deadline = time.monotonic() + RESULT_TIMEOUT_S
    replies: list[dict[str, object]] | None = None
    while time.monotonic() < deadline and not replies:
        replies = client.control.ping(timeout=2.0)
    assert replies == [{"w1@sievemq-test": {"ok": "pong"}}], worker.output()
