"""A private three-node RabbitMQ cluster on this machine, for side-by-side benchmarks.

Debian's rabbitmq-server (3.10.8 on Debian 12; ``bench/rabbitmq.sh --install-only`` installs
it) run as the calling user, bypassing Debian's wrapper as ``bench/rabbitmq.sh`` does: N
Erlang nodes ``benchK-PORT@localhost`` with their own AMQP and distribution ports on
127.0.0.1, one private epmd on a free port, one shared Erlang cookie, every node's state in
a temporary folder under /tmp. Nodes 2..N join node 1 (``rabbitmqctl join_cluster``).

Every process is started in its own session and stopped by its id (or its process group's,
which holds only what that start made): nothing is left running when the ``with`` block
ends, even after an error, and the folder is removed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import string
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from sievemq.cluster.local import free_port

SBIN = Path("/usr/lib/rabbitmq/bin")
START_TIMEOUT_S = 180.0


def available() -> bool:
    """Debian's rabbitmq-server and epmd are installed."""
    return (SBIN / "rabbitmq-server").exists() and shutil.which("epmd") is not None


def version() -> str:
    got = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"], capture_output=True, text=True
    )
    return got.stdout.strip()


@dataclass
class RabbitNode:
    """One Erlang node of the cluster; ``start`` again after ``kill`` keeps its data."""

    index: int
    base: Path
    cookie: str
    epmd_port: int
    amqp_port: int = field(default_factory=free_port)
    dist_port: int = field(default_factory=free_port)
    wrapper: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return f"bench{self.index}-{self.amqp_port}@localhost"

    @property
    def home(self) -> Path:
        return self.base / f"node{self.index}"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/%2F"

    @property
    def pid(self) -> int:
        """The beam.smp process (RabbitMQ writes its pid file itself)."""
        return int((self.home / "rabbitmq.pid").read_text().strip())

    def env(self) -> dict[str, str]:
        home = self.home
        return dict(
            os.environ,
            HOME=str(home / "home"),  # the Erlang cookie
            RABBITMQ_NODENAME=self.name,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.amqp_port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_CONF_ENV_FILE=str(home / "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=str(home / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(home / "advanced.config"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(home / "enabled_plugins"),
            RABBITMQ_MNESIA_BASE=str(home / "mnesia"),
            RABBITMQ_LOG_BASE=str(home / "log"),
            RABBITMQ_PID_FILE=str(home / "rabbitmq.pid"),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            ERL_EPMD_PORT=str(self.epmd_port),
            ERL_EPMD_ADDRESS="127.0.0.1",
            LC_ALL="C.UTF-8",
            LANG="C.UTF-8",
        )

    def write_config(self) -> None:
        home = self.home
        for sub in ("home", "mnesia", "log"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        (home / "home").chmod(0o700)
        cookie = home / "home" / ".erlang.cookie"
        cookie.write_text(self.cookie)
        cookie.chmod(0o400)
        (home / "rabbitmq-env.conf").write_text("")
        (home / "advanced.config").write_text("[].\n")
        (home / "enabled_plugins").write_text("[].\n")
        (home / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.amqp_port}\n"
            "loopback_users.guest = true\n"
            "log.console = false\n"
            "log.file.level = warning\n"
        )

    def ctl(self, *args: str, timeout: float = 120.0) -> str:
        """rabbitmqctl against this node; raises with its output when it fails."""
        got = subprocess.run(
            [str(SBIN / "rabbitmqctl"), "-q", "-n", self.name, *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
        )
        if got.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} on {self.name}: {got.stderr}")
        return got.stdout

    def start(self) -> RabbitNode:
        """Start the node (on its data, if it ran before) and wait until it serves."""
        (self.home / "rabbitmq.pid").unlink(missing_ok=True)
        log = (self.home / "log" / "server.out").open("ab")
        self.wrapper = subprocess.Popen(
            [str(SBIN / "rabbitmq-server")],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env(),
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (self.home / "rabbitmq.pid").exists() or not self._pid_written():
            if self.wrapper.poll() is not None:
                raise RuntimeError(f"{self.name} exited while starting: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start: {self.log_tail()}")
            time.sleep(0.2)
        self.ctl("await_startup", "--timeout", str(int(START_TIMEOUT_S)), timeout=START_TIMEOUT_S)
        return self

    def _pid_written(self) -> bool:
        try:
            return bool((self.home / "rabbitmq.pid").read_text().strip())
        except OSError:
            return False

    def log_tail(self, lines: int = 30) -> str:
        path = self.home / "log" / "server.out"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def running(self) -> bool:
        return self.wrapper is not None and self.wrapper.poll() is None

    def kill(self) -> None:
        """SIGKILL the node's beam (a crash), then reap what its start made."""
        with suppress(OSError, ValueError):
            os.kill(self.pid, signal.SIGKILL)
        self._end_group(signal.SIGKILL)

    def stop(self) -> None:
        """``rabbitmqctl stop`` (returns once beam exited); SIGKILL if that fails."""
        if self.running:
            with suppress(RuntimeError, subprocess.TimeoutExpired):
                self.ctl("stop", str(self.home / "rabbitmq.pid"), timeout=60)
        self._end_group(signal.SIGKILL)

    def _end_group(self, sig: signal.Signals) -> None:
        """The wrapper's process group (its own session: beam, erl_child_setup, inet_gethost)."""
        if self.wrapper is None:
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.wrapper.pid, sig)
        with suppress(subprocess.TimeoutExpired):
            self.wrapper.wait(30)


@dataclass
class RabbitCluster:
    nodes: list[RabbitNode]
    epmd: subprocess.Popen[bytes]
    base: Path

    def pids(self) -> list[int]:
        """The beam pids of the running nodes."""
        return [n.pid for n in self.nodes if n.running]

    def leader(self, queue: str) -> str:
        """The node name leading a quorum queue or stream, as ``list_queues`` says."""
        for node in self.nodes:
            if not node.running:
                continue
            for line in node.ctl("list_queues", "name", "leader").splitlines():
                parts = line.split("\t")
                if len(parts) == 2 and parts[0] == queue:
                    return parts[1].strip()
        raise LookupError(queue)


@contextmanager
def rabbitmq_cluster(size: int = 3) -> Iterator[RabbitCluster]:
    """``size`` nodes joined into one cluster; all stopped and their folder removed after."""
    base = Path(tempfile.mkdtemp(prefix="sievemq-rmq-cluster-"))
    cookie = "".join(secrets.choice(string.ascii_uppercase) for _ in range(20))
    epmd_port = free_port()
    epmd_log = (base / "epmd.out").open("wb")
    epmd = subprocess.Popen(
        ["epmd", "-address", "127.0.0.1", "-port", str(epmd_port)],
        stdout=epmd_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    epmd_log.close()
    nodes = [RabbitNode(i + 1, base, cookie, epmd_port) for i in range(size)]
    try:
        for node in nodes:
            node.write_config()
            node.start()
        first = nodes[0]
        for node in nodes[1:]:
            node.ctl("stop_app")
            node.ctl("join_cluster", first.name)
            node.ctl("start_app")
        yield RabbitCluster(nodes, epmd, base)
    finally:
        for node in reversed(nodes):
            node.stop()
        epmd.terminate()
        try:
            epmd.wait(10)
        except subprocess.TimeoutExpired:
            epmd.kill()
            epmd.wait(10)
        shutil.rmtree(base, ignore_errors=True)
