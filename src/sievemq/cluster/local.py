"""A cluster on one machine: an etcd and N `sievemq serve` processes (`sievemq cluster up`).

``EtcdProcess`` runs Debian's etcd (``/usr/bin/etcd``, package etcd-server) as one member on
loopback; the tests start theirs through it too (``sievemq.testing.etcd``). ``cluster_up``
starts the etcd, then every node at once, prints each node's ready line as it comes, and on
SIGINT/SIGTERM stops the nodes (SIGTERM, each shuts down cleanly) and then the etcd.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ETCD = "/usr/bin/etcd"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (etcd cannot be given port 0 and tell which it took)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class EtcdProcess:
    """One etcd member on ``host``: started, stopped, killed and started again on its data
    directory (or, with ``wipe``, on an empty one: etcd that lost everything).

    Alone by default; a member of several (the chaos suite's three) is given its
    ``name``, the ``initial_cluster`` (``NAME=PEER_URL,...``) and started with ``launch``
    on every member before ``wait_healthy``: none is healthy before a majority runs."""

    data_dir: Path
    host: str = "127.0.0.1"
    client_port: int = 0  # 0: a free one, chosen at the first start and kept
    peer_port: int = 0
    unsafe_no_fsync: bool = False  # tests: etcd skips fsync (its data is thrown away anyway)
    name: str = "sievemq-etcd"
    initial_cluster: str = ""  # empty: this member alone
    extra_args: tuple[str, ...] = ()
    uid: int | None = None  # run as this user (the chaos suite cuts a member by its uid)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def peer_url(self) -> str:
        self.peer_port = self.peer_port or free_port(self.host)
        return f"http://{self.host}:{self.peer_port}"

    def start(self, timeout_s: float = START_TIMEOUT_S, wipe: bool = False) -> EtcdProcess:
        """Start etcd and wait until it says it is healthy."""
        self.launch(wipe)
        return self.wait_healthy(timeout_s)

    def launch(self, wipe: bool = False) -> EtcdProcess:
        """Start the process, without waiting for it to serve."""
        if not os.access(ETCD, os.X_OK):
            raise RuntimeError(f"{ETCD} not found: install etcd-server (make etcd)")
        self.client_port = self.client_port or free_port(self.host)
        member_dir = self.data_dir / "member-data"
        if wipe:
            shutil.rmtree(member_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.uid is not None:
            os.chown(self.data_dir, self.uid, -1)
        peer = self.peer_url
        cmd = [
            ETCD,
            "--name",
            self.name,
            "--data-dir",
            str(member_dir),
            "--listen-client-urls",
            self.url,
            "--advertise-client-urls",
            self.url,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            self.initial_cluster or f"{self.name}={peer}",
            # nodes rewrite their records every few seconds: keep an hour of history only
            "--auto-compaction-mode",
            "periodic",
            "--auto-compaction-retention",
            "1h",
            *(["--unsafe-no-fsync"] if self.unsafe_no_fsync else []),
            *self.extra_args,
        ]
        self.log_path = self.data_dir / "etcd.log"
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, user=self.uid, group=self.uid
        )
        return self

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> EtcdProcess:
        """Wait until the member says it is healthy (it serves: a majority runs)."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout_s
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"etcd did not start: see {self.log_path}\n{self.log_tail()}")
            time.sleep(0.05)
        return self

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1) as answer:
                return b'"true"' in answer.read()
        except (OSError, urllib.error.URLError):
            return False

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM and wait."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL and wait."""
        self._end(signal.SIGKILL)

    def _end(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


# ---------------------------------------------------------------- sievemq cluster up


def _port(base: int, index: int) -> str:
    return str(base + index if base else 0)


def _shared(base: int) -> int:
    """One port for every node (``--shared-ports``): a free one when the base is 0."""
    return base or free_port()


def run_up(args: argparse.Namespace) -> int:
    """`sievemq cluster up`: runs until SIGINT/SIGTERM; returns the exit status."""
    if args.nodes < 1:
        print("sievemq cluster up: --nodes must be at least 1", file=sys.stderr)
        return 2
    data_dir: Path = args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    etcd: EtcdProcess | None = None
    endpoints = args.etcd
    if endpoints is None:
        etcd = EtcdProcess(data_dir / "etcd", client_port=args.etcd_port)
        try:
            etcd.start()
        except RuntimeError as error:
            print(f"sievemq cluster up: {error}", file=sys.stderr)
            return 1
        endpoints = etcd.url
        print(f"etcd ready {etcd.url} (log {etcd.log_path})", flush=True)
    nodes: list[tuple[str, subprocess.Popen[str]]] = []
    shared = args.shared_ports
    amqp_port, admin_port = _shared(args.amqp_port), _shared(args.admin_port)
    try:
        for i in range(args.nodes):
            name = f"node{i + 1}"
            node_dir = data_dir / name
            node_dir.mkdir(parents=True, exist_ok=True)
            cmd = [
                sys.executable,
                "-m",
                "sievemq",
                "serve",
                "--node-name",
                name,
                "--cluster-etcd",
                endpoints,
                "--data-dir",
                str(node_dir),
                "--amqp-port",
                str(amqp_port) if shared else _port(args.amqp_port, i),
                "--stream-port",
                _port(args.stream_port, i),
                "--admin-port",
                str(admin_port) if shared else _port(args.admin_port, i),
                "--cluster-port",
                _port(args.cluster_port, i),
                "--cluster-lease-ttl",
                str(args.cluster_lease_ttl),
                *(["--reuse-port"] if shared else []),
            ]
            log = (data_dir / f"{name}.log").open("ab")
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
            log.close()
            nodes.append((name, proc))
        if not _announce(nodes, data_dir, stop):
            return 1
        while not stop.wait(0.5):
            for name, proc in nodes:
                if proc.poll() is not None and proc.returncode is not None:
                    print(
                        f"{name} exited with status {proc.returncode} "
                        f"(log {data_dir / f'{name}.log'})",
                        file=sys.stderr,
                        flush=True,
                    )
            nodes = [(n, p) for n, p in nodes if p.poll() is None]
        return 0
    finally:
        _stop_nodes(nodes)
        if etcd is not None:
            etcd.stop()


def _announce(
    nodes: list[tuple[str, subprocess.Popen[str]]], data_dir: Path, stop: threading.Event
) -> bool:
    """Print each node's ready line (they start in parallel); False when one failed."""
    for name, proc in nodes:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the ready line, or '' when the node exited first
        if not line.startswith("sievemq ready") or stop.is_set():
            if not stop.is_set():
                print(
                    f"sievemq cluster up: {name} did not start (log {data_dir / f'{name}.log'})",
                    file=sys.stderr,
                )
            return False
        print(line.rstrip("\n"), flush=True)
    return True


def _stop_nodes(nodes: list[tuple[str, subprocess.Popen[str]]]) -> None:
    for _, proc in nodes:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for _, proc in nodes:
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
