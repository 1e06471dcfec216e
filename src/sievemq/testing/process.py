"""Run a real `sievemq serve` subprocess: the one launcher every test suite uses.

Why a subprocess at all: only a real process can be SIGKILLed (the recovery tests), can show
that the command line, the ready line and the exit status work, and runs on its own event
loop so a blocking client library (pika) in the test cannot deadlock it.

The server picks free ports (port 0) and announces them on one stdout line,
``sievemq ready amqp=HOST:PORT [amqps=HOST:PORT] stream=HOST:PORT [streams=HOST:PORT]
admin=http://HOST:PORT`` (read by key: the amqps and streams fields are there only with TLS);
we wait for that line instead of
polling a port, so a test never races the listener. stderr goes to a file so a chatty server
can never block on a full pipe, and it is shown when start-up fails.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

READY_RE = re.compile(r"^sievemq ready (?P<fields>.*)$")
# generous: a loaded 2-core machine (a CI run beside other work) can take many seconds to
# import and open the store; a healthy start still returns as soon as the ready line appears
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


def ready_fields(text: str) -> dict[str, str]:
    """``amqp=H:P admin=http://H:P`` -> {"amqp": "H:P", "admin": "http://H:P"}."""
    pairs = (part.split("=", 1) for part in text.split() if "=" in part)
    return {key: value for key, value in pairs}


def _limit_descriptors(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` setting the child's descriptor limit, soft and hard (``ulimit -n``)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return apply


def status_kib(pid: int, field: str) -> int:
    """A memory figure of a process in KiB from ``/proc/PID/status`` (``VmRSS``, ``VmHWM``
    the peak resident size): the memory tests' measure of a server."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


class ServerStartError(RuntimeError):
    """The server did not print its ready line in time (message carries its stderr)."""


@dataclass
class ServerProcess:
    """One server on one data directory; can be stopped, killed and started again."""

    data_dir: Path
    extra_args: tuple[str, ...] = ()
    # RLIMIT_NOFILE of the server, soft and hard (so it cannot raise it): None leaves ours
    fd_limit: int | None = None
    # more environment variables of the server (the cluster's clock test preloads faketime)
    env: dict[str, str] = field(default_factory=dict)
    host: str = ""
    amqp_port: int = 0
    amqps_port: int = 0  # 0 unless the server was started with --tls-cert/--tls-key
    stream_port: int = 0  # the RabbitMQ Stream protocol listener
    stream_tls_port: int = 0  # its TLS twin, with --tls-cert/--tls-key
    admin_url: str = ""
    admin_port: int = 0
    proc: subprocess.Popen[str] | None = None
    stdout_lines: list[str] = field(default_factory=list)
    _stderr_path: Path | None = None
    _starts: int = 0
    _pump: threading.Thread | None = None

    @property
    def pid(self) -> int:
        """The process id of the current (or last) process."""
        assert self.proc is not None, "server not started"
        return self.proc.pid

    @property
    def url(self) -> str:
        """AMQP URL for the default user and vhost."""
        return f"amqp://guest:guest@{self.host}:{self.amqp_port}/%2F"

    @property
    def running(self) -> bool:
        """True while the process has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = START_TIMEOUT) -> ServerProcess:
        """Start the server and block until it prints its ready line."""
        assert not self.running, "server already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._starts += 1
        self._stderr_path = self.data_dir.parent / f"{self.data_dir.name}.stderr.{self._starts}"
        stderr = self._stderr_path.open("w")
        cmd = [
            sys.executable,
            "-m",
            "sievemq",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--amqp-port",
            "0",
            "--admin-port",
            "0",
            "--stream-port",
            "0",
            "--stream-tls-port",
            "0",
            *self.extra_args,
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            bufsize=1,
            preexec_fn=None if self.fd_limit is None else _limit_descriptors(self.fd_limit),
        )
        stderr.close()
        ready: list[re.Match[str]] = []
        got_ready = threading.Event()
        proc = self.proc

        def pump() -> None:
            # keeps reading stdout for the life of the process so it never blocks on a pipe
            assert proc.stdout is not None
            for line in proc.stdout:
                self.stdout_lines.append(line.rstrip("\n"))
                match = READY_RE.search(line)
                if match and not ready:
                    ready.append(match)
                    got_ready.set()
            proc.stdout.close()  # EOF: the process exited
            got_ready.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout
        while not got_ready.wait(0.05):
            if time.monotonic() > deadline:
                break
        if not ready:
            self._abort()
            raise ServerStartError(
                f"no ready line within {timeout}s (exit={self.proc.poll()})\n"
                f"stdout:\n{chr(10).join(self.stdout_lines)}\nstderr:\n{self.stderr()}"
            )
        fields = ready_fields(ready[0]["fields"])
        self.host, port = fields["amqp"].rsplit(":", 1)
        self.amqp_port = int(port)
        self.amqps_port = int(fields["amqps"].rsplit(":", 1)[1]) if "amqps" in fields else 0
        self.stream_port = int(fields["stream"].rsplit(":", 1)[1]) if "stream" in fields else 0
        self.stream_tls_port = (
            int(fields["streams"].rsplit(":", 1)[1]) if "streams" in fields else 0
        )
        self.admin_url = fields["admin"]
        self.admin_port = int(self.admin_url.rsplit(":", 1)[1])
        return self

    def stderr(self) -> str:
        """Everything the current (or last) process wrote to stderr."""
        if self._stderr_path is None or not self._stderr_path.exists():
            return ""
        return self._stderr_path.read_text(errors="replace")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait; returns the exit status (the caller asserts 0)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._abort()
                raise AssertionError(
                    f"server did not exit {timeout}s after SIGTERM\nstderr:\n{self.stderr()}"
                ) from None
        self._join_pump()
        return self.proc.returncode

    def terminate(self) -> int:
        """SIGTERM and wait (the name ``subprocess.Popen`` uses); same as ``stop``."""
        return self.stop()

    def kill(self) -> None:
        """SIGKILL: the crash the recovery tests simulate."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(STOP_TIMEOUT)
        self._join_pump()

    def _join_pump(self) -> None:
        """The stdout reader ends (and closes the pipe) once the process has exited."""
        if self._pump is not None:
            self._pump.join(STOP_TIMEOUT)

    def restart(self) -> ServerProcess:
        """Start again on the same data directory (after stop() or kill())."""
        assert not self.running
        return self.start()

    def __enter__(self) -> ServerProcess:
        return self if self.running else self.start()

    def __exit__(self, *exc_info: object) -> None:
        """Stop it; a running server must exit 0 after SIGTERM (asserted)."""
        if self.running:
            code = self.stop()
            assert code == 0, f"exit status {code} after SIGTERM\nstderr:\n{self.stderr()}"

    def _abort(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)


def start_server_process(
    data_dir: Path, *extra_args: str, timeout: float = START_TIMEOUT
) -> ServerProcess:
    """Start ``sievemq serve`` on free ports over ``data_dir``; returns once it is ready.

    ``extra_args`` are more command-line flags (``"--fsync", "always"``). Use the result as a
    context manager to have it stopped, and its clean exit asserted, at the end.
    """
    return ServerProcess(data_dir, extra_args=tuple(extra_args)).start(timeout)
