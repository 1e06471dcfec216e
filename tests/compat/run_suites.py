"""Run the published test suites of AMQP client libraries against a fresh SieveMQ.

    .venv/bin/python -m tests.compat.run_suites [--suite NAME ...] [--rabbitmq-url URL]
        [--pika-source DIR] [--work DIR] [--timeout S] [--pytest-args "ARGS"]

One command: it fetches the pinned suite versions, installs each suite's test dependencies
into a virtual environment of its own (``uv venv`` + ``uv pip install``, under ``--work``),
starts a fresh SieveMQ (``sievemq serve`` on free ports of 127.0.0.1, a new data directory,
TLS on with the aiormq suite's server certificate) and runs every suite against it. With
``--rabbitmq-url`` the same suites also run against that broker (the reference counts; only
its plain AMQP port is used, so TLS-only tests are deselected there). Prints one JSON object:
per suite and target the passed / failed / error / skipped counts and the failing test ids.

The suites' code is fetched and run as published; only their broker address is changed:
    aiormq 7.2.4, aio-pika 10.2.1   PyPI sdists (their tests start a Docker RabbitMQ: the
                                    docker fixtures are replaced by ones naming our broker)
    kombu 5.7.0                     PyPI sdist, t/integration/test_py_amqp.py
                                    (RABBITMQ_HOST / RABBITMQ_5672_TCP)
    pika 1.4.4                      the release commit's tests/acceptance (the sdist has no
                                    tests): github.com/pika/pika @ 60fee420, or --pika-source
                                    (a checkout of that commit); 127.0.0.1:5672 is rewritten
    amqp091-go 1.5.0                Debian's golang-github-rabbitmq-amqp091-go-dev
                                    (/usr/share/gocode), `go test -tags integration`
                                    with AMQP_URL, offline GOPATH mode
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sievemq.testing import start_server_process

REPO = Path(__file__).resolve().parents[2]
UV = REPO / ".tools" / "bin" / "uv"
SUITE_TIMEOUT_S = 1800  # per suite and target (--timeout); at the limit pytest is interrupted

PIKA_COMMIT = "60fee4203a30d5dfa0500857cea6a65ef571d46c"  # "pika 1.4.4"
PIKA_TARBALL = f"https://codeload.github.com/pika/pika/tar.gz/{PIKA_COMMIT}"
GO_SOURCE = Path("/usr/share/gocode/src/github.com/rabbitmq/amqp091-go")
GO_VERSION = "1.5.0"  # golang-github-rabbitmq-amqp091-go-dev 1.5.0-2 (Debian bookworm)

# test dependencies per suite, pinned (the suites' own dev groups, minus linters/coverage)
PY_SUITES: dict[str, dict[str, Any]] = {
    "aiormq": {
        "sdist": "aiormq==7.2.4",
        "deps": ["pytest==9.1.1", "aiomisc-pytest==2.0.0", "aiomisc==18.0.37"],
        "args": ["tests"],
    },
    "aio-pika": {
        "sdist": "aio-pika==10.2.1",
        "deps": [
            "pytest==9.1.1",
            "aiomisc-pytest==2.0.0",
            "aiomisc==18.0.37",
            "shortuuid==1.0.13",
            "timeout-decorator==0.5.0",
        ],
        "args": ["tests"],
    },
    "kombu": {
        "sdist": "kombu==5.7.0",
        "deps": ["pytest==9.1.1", "pytest-rerunfailures==16.7", "amqp==5.4.2"],
        # the suite's own marker/options (t/integration is run per transport in its CI)
        "args": ["t/integration/test_py_amqp.py", "-p", "no:cacheprovider"],
    },
    "pika": {
        "deps": [
            "pytest==9.1.1",
            "pytest-timeout==2.4.0",
            "tornado==6.5.2",
            "twisted==25.5.0",
            "gevent==25.9.1",
        ],
        "args": ["tests/acceptance"],
    },
}

# Appended to the suites' tests/conftest.py (later definitions replace the Docker ones)
BROKER_FIXTURES = """

# --- added by SieveMQ's tests/compat/run_suites.py: the broker under test, not Docker ---
import os as _sq_os
import types as _sq_types

import pytest as _sq_pytest
from yarl import URL as _SqURL


def pytest_configure(config):
    pass


@_sq_pytest.fixture(scope="session")
def rabbitmq_container():
    url = _SqURL(_sq_os.environ["SUITE_AMQP_URL"])
    ports = {"5672/tcp": url.port, "5671/tcp": int(_sq_os.environ.get("SUITE_AMQPS_PORT") or 1)}
    return _sq_types.SimpleNamespace(host=url.host, ports=ports, id="sievemq-run-suites")


@_sq_pytest.fixture(scope="session")
def amqp_direct_url(rabbitmq_container):
    return _SqURL(_sq_os.environ["SUITE_AMQP_URL"])
"""


@dataclass
class Target:
    name: str
    url: str  # amqp://guest:guest@host:port/
    amqps_port: int = 0

    @property
    def host(self) -> str:
        return self.url.split("@", 1)[1].split(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])


@dataclass
class Result:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "skipped": self.skipped,
            "failures": sorted(self.failures),
        }
        if self.note:
            out["note"] = self.note
        return out


def log(msg: str) -> None:
    print(f"[run_suites] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if proc.returncode:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return proc


def _norm(name: str) -> str:
    return name.lower().replace("-", "_")


def fetch_sdist(spec: str, work: Path) -> Path:
    """Download and unpack one sdist from PyPI; returns the unpacked directory."""
    dest = work / "sdists"
    dest.mkdir(parents=True, exist_ok=True)
    name, version = spec.split("==")
    stem = _norm(f"{name}-{version}")
    for p in dest.iterdir():
        if p.is_dir() and _norm(p.name) == stem:
            return p
    python = work / "venv-fetch" / "bin" / "python"
    if not python.exists():
        run([str(UV), "venv", "-q", "--seed", str(work / "venv-fetch")])
    # only the named package from source (its build backend may come as a wheel)
    run(
        [str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", name,
         spec, "-d", str(dest)]
    )  # fmt: skip
    archive = next(p for p in dest.glob("*.tar.gz") if _norm(p.name) == f"{stem}.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return next(p for p in dest.iterdir() if p.is_dir() and _norm(p.name) == stem)


def fetch_pika(work: Path, source: Path | None) -> Path:
    dest = work / f"pika-{PIKA_COMMIT[:8]}"
    if dest.exists():
        return dest
    if source is not None:
        if (source / ".git").exists() or (source / "HEAD").exists():
            data = subprocess.run(
                ["git", "--git-dir", str(source / ".git" if (source / ".git").exists() else source),
                 "archive", "--format=tar", PIKA_COMMIT],
                check=True, capture_output=True,
            ).stdout  # fmt: skip
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                tar.extractall(dest, filter="data")
        else:
            shutil.copytree(source, dest)
    else:
        with urllib.request.urlopen(PIKA_TARBALL, timeout=120) as resp:
            data = resp.read()
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                tar.extractall(tmp, filter="data")
            shutil.move(str(next(Path(tmp).iterdir())), dest)
    return dest


def make_venv(work: Path, suite: str, packages: list[str]) -> Path:
    venv = work / f"venv-{suite}"
    stamp = venv / ".suite-deps"
    want = "\n".join(packages)
    if stamp.exists() and stamp.read_text() == want:
        return venv / "bin" / "python"
    run([str(UV), "venv", "-q", "--clear", "--python", sys.executable, str(venv)])
    run([str(UV), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *packages])
    stamp.write_text(want)
    return venv / "bin" / "python"


def prepare_python_suite(name: str, work: Path, pika_source: Path | None) -> tuple[Path, Path]:
    """Returns (suite directory, python of its venv)."""
    spec = PY_SUITES[name]
    if name == "pika":
        src = fetch_pika(work, pika_source)
        # the suite connects to 127.0.0.1 / localhost port 5672: only the port is changed
        for f in [
            *(src / "tests" / "acceptance").glob("*.py"),
            *(src / "tests" / "base").glob("*.py"),
        ]:
            text = f.read_text()
            new = re.sub(r"""((?:['"]port['"]:\s*)|(?:port=))5672\b""",
                         r"\g<1>int(__import__('os').environ['SUITE_PORT'])", text)  # fmt: skip
            if new != text:
                f.write_text(new)
        python = make_venv(work, name, [*spec["deps"], str(src)])
        return src, python
    src = fetch_sdist(spec["sdist"], work)
    if name in ("aiormq", "aio-pika"):
        conftest = src / "tests" / "conftest.py"
        text = conftest.read_text()
        if "run_suites.py" not in text:
            conftest.write_text(text + BROKER_FIXTURES)
    python = make_venv(work, name, [*spec["deps"], str(src)])
    return src, python


def parse_junit(path: Path) -> Result:
    res = Result()
    if not path.exists():
        res.note = "no junit report (the run crashed or timed out)"
        return res
    root = ET.parse(path).getroot()
    # a rerun (pytest-rerunfailures) repeats the case: its last outcome counts
    final: dict[str, set[str]] = {}
    for case in root.iter("testcase"):
        final[f"{case.get('classname', '')}::{case.get('name', '')}"] = {c.tag for c in case}
    for ident, tags in final.items():
        if "failure" in tags:
            res.failed += 1
            res.failures.append(ident)
        elif "error" in tags:
            res.errors += 1
            res.failures.append(ident)
        elif "skipped" in tags:
            res.skipped += 1
        else:
            res.passed += 1
    return res


def run_python_suite(name: str, src: Path, python: Path, target: Target, work: Path) -> Result:
    spec = PY_SUITES[name]
    report = work / f"junit-{name}-{target.name}.xml"
    report.unlink(missing_ok=True)
    env = dict(
        os.environ,
        SUITE_AMQP_URL=target.url,
        SUITE_AMQPS_PORT=str(target.amqps_port or ""),
        SUITE_HOST=target.host,
        SUITE_PORT=str(target.port),
        SUITE_HOSTPORT=f"{target.host}:{target.port}",
        RABBITMQ_HOST=target.host,
        RABBITMQ_5672_TCP=str(target.port),
        AMQP_URL=target.url,
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("VIRTUAL_ENV", None)
    args = [*spec["args"]]
    if EXTRA_PYTEST_ARGS:  # test ids or files of this suite in place of its default selection
        args = [a for a in args if not a.startswith(("t/", "tests"))] + EXTRA_PYTEST_ARGS
    if not target.amqps_port:
        args += ["-k", "not amqps and not ssl and not tls"]
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
           f"--junitxml={report}", "-o", "junit_family=xunit1", *args]  # fmt: skip
    log(f"{name} vs {target.name}: {' '.join(cmd[3:])}")
    log_path = work / f"log-{name}-{target.name}.txt"
    # output goes to the log as it comes (a long run can be followed); at the time limit
    # pytest gets SIGINT, which ends the session and still writes the junit report of the
    # tests run so far
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, cwd=src, env=env, text=True, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
        try:
            proc.wait(timeout=SUITE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            res = parse_junit(report)
            res.note = f"interrupted at the time limit ({SUITE_TIMEOUT_S}s): partial counts"
            return res
    return parse_junit(report)


def run_go_suite(target: Target, work: Path) -> Result:
    if not GO_SOURCE.exists() or shutil.which("go") is None:
        return Result(note="needs golang-go and golang-github-rabbitmq-amqp091-go-dev")
    env = dict(
        os.environ,
        GO111MODULE="off",
        GOFLAGS="",
        GOPROXY="off",
        GOPATH="/usr/share/gocode",
        GOCACHE=str(work / "gocache"),
        AMQP_URL=target.url,
    )
    cmd = ["go", "test", "-count=1", "-json", "-tags", "integration", "-timeout", "900s",
           "github.com/rabbitmq/amqp091-go"]  # fmt: skip
    log(f"amqp091-go vs {target.name}")
    proc = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=SUITE_TIMEOUT_S,
                          cwd=work)  # fmt: skip
    (work / f"log-amqp091-go-{target.name}.txt").write_text(proc.stdout + proc.stderr)
    res = Result()
    for line in proc.stdout.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        test = ev.get("Test")
        if not test or "/" in test:  # top-level tests only (subtests belong to them)
            continue
        action = ev.get("Action")
        if action == "pass":
            res.passed += 1
        elif action == "fail":
            res.failed += 1
            res.failures.append(test)
        elif action == "skip":
            res.skipped += 1
    if proc.returncode and not res.failed:
        res.note = "go test failed: " + proc.stderr[-500:]
    return res


@contextmanager
def fresh_sievemq(work: Path, certs: Path | None) -> Iterator[Target]:
    data = Path(tempfile.mkdtemp(prefix="sievemq-suites-", dir=work))
    extra: list[str] = ["--amqp-host", "127.0.0.1"]
    if certs is not None:
        extra += ["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
                  "--amqps-port", "0"]  # fmt: skip
    server = start_server_process(data / "data", *extra)
    try:
        yield Target("sievemq", f"amqp://guest:guest@127.0.0.1:{server.amqp_port}/",
                     server.amqps_port)  # fmt: skip
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


ALL = ("aiormq", "aio-pika", "pika", "kombu", "amqp091-go")
EXTRA_PYTEST_ARGS: list[str] = []


def main() -> int:
    global SUITE_TIMEOUT_S, EXTRA_PYTEST_ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--suite", action="append", choices=ALL, help="default: all")
    ap.add_argument("--rabbitmq-url", help="also run against this broker (reference counts)")
    ap.add_argument("--pika-source", type=Path, help="pika checkout/git dir (offline)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sievemq-suites")
    ap.add_argument("--no-sievemq", action="store_true", help="only the --rabbitmq-url run")
    ap.add_argument("--timeout", type=int, default=SUITE_TIMEOUT_S, help="seconds per suite run")
    ap.add_argument("--pytest-args", default="",
                    help="Python suites: these test ids/files instead (shell quoting)")  # fmt: skip
    opts = ap.parse_args()
    SUITE_TIMEOUT_S = opts.timeout
    EXTRA_PYTEST_ARGS = shlex.split(opts.pytest_args)
    work: Path = opts.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    suites = opts.suite or list(ALL)
    prepared: dict[str, tuple[Path, Path]] = {}
    for name in suites:
        if name in PY_SUITES:
            log(f"preparing {name}")
            prepared[name] = prepare_python_suite(name, work, opts.pika_source)
    certs = None
    if "aiormq" in suites or "aio-pika" in suites:
        certs = fetch_sdist(PY_SUITES["aiormq"]["sdist"], work) / "tests" / "certs"
    out: dict[str, Any] = {"versions": {
        "aiormq": "7.2.4", "aio-pika": "10.2.1", "kombu": "5.7.0",
        "pika": f"1.4.4 ({PIKA_COMMIT[:8]})", "amqp091-go": GO_VERSION}, "suites": {}}  # fmt: skip

    def run_all(target: Target, names: list[str]) -> None:
        for name in names:
            if name == "amqp091-go":
                res = run_go_suite(target, work)
            else:
                src, python = prepared[name]
                res = run_python_suite(name, src, python, target, work)
            out["suites"].setdefault(name, {})[target.name] = res.as_json()
            log(f"{name} vs {target.name}: {res.passed} passed, {res.failed} failed, "
                f"{res.errors} errors, {res.skipped} skipped")  # fmt: skip

    if not opts.no_sievemq:
        for name in suites:  # a fresh server per suite: no leftovers of one suite in the next
            with fresh_sievemq(work, certs) as target:
                run_all(target, [name])
    if opts.rabbitmq_url:
        run_all(Target("rabbitmq", opts.rabbitmq_url), suites)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
