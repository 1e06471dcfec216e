"""The README's example, and those of docs/examples.md, run unchanged (but for the port)
against a fresh server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sievemq.testing import ServerProcess
from sievemq.testing.pika_client import connect

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
EXAMPLES = ROOT / "docs" / "examples.md"


def _blocks(language: str, doc: Path) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", doc.read_text(), re.DOTALL)


def _example(language: str, marker: str, doc: Path) -> tuple[str, str]:
    """The code block of `doc` in `language` containing `marker`, and its `# ...` result."""
    for block in _blocks(language, doc):
        if marker in block:
            expected = re.search(r"(?:#|//) (\[.*\])\s*$", block, re.MULTILINE)
            assert expected is not None, "the example must show its output in a comment"
            return block, expected.group(1)
    raise AssertionError(f"no {language} example with {marker!r} in {doc.name}")


def _run(command: list[str], code: str, port: int, **kwargs: object) -> str:
    source = code.replace("5672", str(port))
    result = subprocess.run(
        [*command, source],
        capture_output=True,
        text=True,
        timeout=60,
        **kwargs,  # type: ignore[call-overload]
    )
    assert result.returncode == 0, result.stderr
    return str(result.stdout).strip()


@pytest.mark.parametrize(
    ("client", "doc"), [("import pika", README), ("import aio_pika", EXAMPLES)]
)
def test_python_example_prints_what_the_docs_say(
    fresh_server: ServerProcess, client: str, doc: Path
) -> None:
    code, expected = _example("python", client, doc)
    assert _run([sys.executable, "-c"], code, fresh_server.amqp_port) == expected


def test_amqplib_example_prints_what_the_docs_say(
    fresh_server: ServerProcess, node_modules: Path
) -> None:
    code, expected = _example("javascript", 'require("amqplib")', EXAMPLES)
    env = {**os.environ, "NODE_PATH": str(node_modules)}
    output = _run(["node", "-e"], code, fresh_server.amqp_port, env=env)
    assert output == expected


def test_cli_example_publishes_and_tails(fresh_server: ServerProcess) -> None:
    """The shell example of `sievemq publish` / `sievemq tail`, run by bash line by line."""
    block = next(b for b in _blocks("sh", EXAMPLES) if "sievemq tail" in b)
    conn = connect(fresh_server)
    conn.channel().queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    env = {
        **os.environ,
        "SIEVEMQ_URI": fresh_server.url,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    script = "set -e\n" + block.replace("localhost:5672", f"127.0.0.1:{fresh_server.amqp_port}")
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == [
        "published 1 message(s) to stream 'events', all confirmed",
        "published 2 message(s) to stream 'events', all confirmed",
    ]
    record = json.loads(lines[2])
    assert (record["offset"], record["filter_value"], record["body"]) == (0, "emea", "order 1")
