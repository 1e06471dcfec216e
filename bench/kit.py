"""The benchmark kit in this repository: the load generator and RabbitMQ for comparisons.

- ``loadgen()``: ``bench/loadgen/sievemq-loadgen`` (Go, the real amqp091-go client), built by
  ``bench/loadgen/build.sh`` from Debian's packages the first time it is needed.
- ``rabbitmq_server()``: ``bench/rabbitmq.sh``, Debian's rabbitmq-server on free loopback
  ports in a temporary directory, in the foreground; stopped (and its directory removed)
  when the block ends.

``use_peers(True)`` (the scripts' ``--peers`` flag, or ``SIEVEMQ_BENCH_PEERS=1``) switches
both to the older kit beside the checkout, ``../shared/peers`` (``SIEVEMQ_PEERS`` to point
elsewhere). ``SIEVEMQ_LOADGEN`` names a load generator binary to use instead of either.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BENCH = Path(__file__).resolve().parent
LOADGEN_DIR = BENCH / "loadgen"
OWN_LOADGEN = LOADGEN_DIR / "sievemq-loadgen"
RABBITMQ_SH = BENCH / "rabbitmq.sh"
PEERS = Path(os.environ.get("SIEVEMQ_PEERS", BENCH.parent.parent / "shared" / "peers"))
PEERS_DEFAULT_PORT = 5682

_peers = os.environ.get("SIEVEMQ_BENCH_PEERS", "") not in ("", "0")


def use_peers(on: bool) -> None:
    """Use ../shared/peers (its loadgen and its rabbitmq.sh) instead of this kit."""
    global _peers
    _peers = on or _peers


def using_peers() -> bool:
    return _peers


def loadgen() -> Path:
    """The load generator binary, built first when it is missing."""
    override = os.environ.get("SIEVEMQ_LOADGEN")
    if override:
        return Path(override)
    if _peers:
        path = PEERS / "bin" / "loadgen"
        if not path.exists():
            subprocess.run([str(PEERS / "loadgen" / "build.sh")], check=True)
        return path
    if not OWN_LOADGEN.exists() or (
        OWN_LOADGEN.stat().st_mtime < (LOADGEN_DIR / "main.go").stat().st_mtime
    ):
        subprocess.run([str(LOADGEN_DIR / "build.sh"), str(OWN_LOADGEN)], check=True)
    return OWN_LOADGEN


@contextmanager
def rabbitmq_server(port: int = 0, stream_port: int = 0) -> Iterator[tuple[int, int]]:
    """A private RabbitMQ node; yields (AMQP port, beam pid). ``port`` 0: a free one.
    ``stream_port``: also enable rabbitmq_stream, listening there (this kit only)."""
    if _peers:
        if stream_port:
            raise SystemExit("the ../shared/peers RabbitMQ has no stream listener option")
        with _peers_rabbitmq(port or PEERS_DEFAULT_PORT) as got:
            yield got
        return
    if port:
        _check_free(port)
    args = [str(RABBITMQ_SH)] + (["--port", str(port)] if port else [])
    if stream_port:
        _check_free(stream_port)
        args += ["--stream-port", str(stream_port)]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None and proc.stderr is not None
    errors: list[str] = []
    drain = threading.Thread(target=lambda: errors.extend(proc.stderr or ()), daemon=True)
    drain.start()
    try:
        line = proc.stdout.readline()
        if not line.startswith("rabbitmq ready "):
            proc.wait(60)
            drain.join(5)
            raise RuntimeError(f"bench/rabbitmq.sh did not start: {line}{''.join(errors)}")
        fields = dict(part.split("=", 1) for part in line.split()[2:])
        yield int(fields["amqp"].rsplit(":", 1)[1]), int(fields["pid"])
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the script stops its node and epmd by pid
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        drain.join(10)  # the script has exited: its stderr is at its end
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _check_free(port: int) -> None:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            raise SystemExit(
                f"127.0.0.1:{port} is already in use (someone else's broker?): "
                "pick another port, or 0 for a free one"
            )


@contextmanager
def _peers_rabbitmq(port: int) -> Iterator[tuple[int, int]]:
    """The ../shared/peers RabbitMQ (a daemon with its data in /tmp/peers-rabbitmq-PORT).

    Another port than 5682 gets its own data dir and epmd port, so two sessions on one
    machine do not share (or stop) each other's broker."""
    _check_free(port)
    env = dict(os.environ, RMQ_PORT=str(port))
    if port != PEERS_DEFAULT_PORT:
        env["RMQ_EPMD_PORT"] = str(4370 + port - PEERS_DEFAULT_PORT)
    script = str(PEERS / "rabbitmq.sh")
    subprocess.run([script, "start"], check=True, capture_output=True, env=env)
    pid = int(Path(f"/tmp/peers-rabbitmq-{port}/rabbitmq.pid").read_text().strip())
    try:
        yield port, pid
    finally:
        subprocess.run([script, "stop"], capture_output=True, env=env)
