"""rstream's own test suite against a fresh SieveMQ: `python -m bench.rstream_suite`.

One command: starts `sievemq serve` on free ports over a scratch data directory, runs the
tests of the rstream repository (rabbitmq-community/rstream) with the installed rstream
client, stops the server, and prints one JSON object: counts, and each test that did not
pass with its outcome. docs/compatibility.md gives the reason for each.

Where the tests come from (their code is not part of SieveMQ and is never copied in):
  --tests DIR   a checkout's folder that holds rstream's `tests/` package, or
  --repo GIT    a git directory of rstream (default: $RSTREAM_REPO, else
                /work/.mirror/rabbitmq-community+rstream/repo); its `tests/` at --rev
                (default HEAD) is exported to a scratch folder.

How they are run, unchanged: `pytest --rmq-host 127.0.0.1 --rmq-port P` plus one plugin
(`bench._rstream_port`) that turns the suite's `--rmq-port` string into an int (the suite
declares the option without a type; a string port breaks `getaddrinfo`). The tests that
call RabbitMQ's management API use `localhost:15672` and connect to `localhost:5552`
whatever `--rmq-port` says; the server's admin API and stream listener are put on those
ports when they are free, else those tests fail for want of them (the JSON says which).

Options: -k EXPR and other pytest arguments after `--`; --timeout per test (default 60 s).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from sievemq.testing import start_server_process

DEFAULT_REPO = "/work/.mirror/rabbitmq-community+rstream/repo"
MANAGEMENT_PORT = 15672  # what the suite's http_requests.py calls
STREAM_PORT = 5552  # what its connection_broke tests connect to, whatever --rmq-port says


def _export_tests(repo: str, rev: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", f"--git-dir={repo}", "archive", rev, "tests"],
        check=True,
        capture_output=True,
    ).stdout
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _results(junit: Path) -> dict[str, Any]:
    root = ET.parse(junit).getroot()
    outcomes: dict[str, str] = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                text = (child.get("message") or "").splitlines()
                detail = text[0][:160] if text else ""
                outcome = f"{child.tag}: {detail}" if detail else child.tag
                if child.tag == "error" and outcomes.get(name, "passed") != "passed":
                    break  # a teardown error after a failure: keep the failure
        if outcomes.get(name, "passed") == "passed":
            outcomes[name] = outcome
    passed = sum(1 for o in outcomes.values() if o == "passed")
    return {
        "total": len(outcomes),
        "passed": passed,
        "failed": sum(1 for o in outcomes.values() if o.startswith("failure")),
        "errors": sum(1 for o in outcomes.values() if o.startswith("error")),
        "skipped": sum(1 for o in outcomes.values() if o.startswith("skipped")),
        "not_passed": {k: v for k, v in sorted(outcomes.items()) if v != "passed"},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", help="folder holding rstream's tests/ package")
    parser.add_argument("--repo", default=os.environ.get("RSTREAM_REPO", DEFAULT_REPO))
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--timeout", type=int, default=60)
    parser.add_argument("-k", dest="keyword", default="")
    parser.add_argument("--verbose", action="store_true", help="all of pytest's output")
    parser.add_argument("--server-log", help="write the server's stderr to this file")
    args, extra = parser.parse_known_args()
    if extra and extra[0] == "--":
        extra = extra[1:]
    repo_root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="rstream-suite-") as scratch:
        work = Path(scratch)
        if args.tests:
            root = Path(args.tests).resolve()
        else:
            root = _export_tests(args.repo, args.rev, work / "src")
        (work / "data").mkdir()
        server_args = ["--stream-frame-max", "1048576"]
        management = _port_free(MANAGEMENT_PORT)
        if management:
            server_args += ["--admin-port", str(MANAGEMENT_PORT)]
        fixed_stream_port = _port_free(STREAM_PORT)
        if fixed_stream_port:
            server_args += ["--stream-port", str(STREAM_PORT)]
        junit = work / "junit.xml"
        started = time.monotonic()
        with start_server_process(work / "data", *server_args) as server:
            (root / "pytest.ini").write_text("[pytest]\n")  # not SieveMQ's own pytest config
            env = dict(os.environ, PYTHONPATH=f"{repo_root}{os.pathsep}{root}")
            command = [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "bench._rstream_port",
                "-p",
                "no:cacheprovider",
                f"--timeout={args.timeout}",
                f"--junitxml={junit}",
                "--rmq-host",
                "127.0.0.1",
                "--rmq-port",
                str(server.stream_port),
                "tests",
            ]
            if args.keyword:
                command += ["-k", args.keyword]
            command += extra
            run = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
            sys.stderr.write(run.stdout if args.verbose else run.stdout[-4000:])
            if args.server_log:
                Path(args.server_log).write_text(server.stderr())
        out = _results(junit) if junit.exists() else {"error": run.stderr[-2000:]}
        out["management_api_on_15672"] = management
        out["stream_port_5552"] = fixed_stream_port
        out["seconds"] = round(time.monotonic() - started, 1)
        out["rstream"] = _rstream_version()
        print(json.dumps(out, indent=2))
    return 0


def _rstream_version() -> str:
    from importlib.metadata import version

    return version("rstream")


if __name__ == "__main__":
    raise SystemExit(main())
