"""`sievemq storage verify|dump` as a user runs them: the real command line in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sievemq.storage import Message, Stream, StreamConfig


def _sievemq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sievemq", *args], capture_output=True, text=True, timeout=60
    )


def _stream_with_two_chunks(directory: Path) -> None:
    with Stream.open(directory, StreamConfig()) as stream:
        stream.append([Message(("emea",), "", "orders", b"\x00\x00", b"first")])
        stream.append([Message((), "amq.topic", "orders.new", b"\x00\x00", b"second")] * 3)


def test_verify_reports_a_healthy_stream(tmp_path: Path) -> None:
    _stream_with_two_chunks(tmp_path / "s")
    result = _sievemq("storage", "verify", str(tmp_path / "s"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4" in result.stdout  # four messages


def test_verify_fails_on_a_corrupted_chunk(tmp_path: Path) -> None:
    _stream_with_two_chunks(tmp_path / "s")
    segment = next((tmp_path / "s").glob("*.segment"))
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF  # flip a byte inside the last chunk's body
    segment.write_bytes(bytes(data))
    result = _sievemq("storage", "verify", str(tmp_path / "s"))
    assert result.returncode == 1
    assert "crc" in (result.stdout + result.stderr).lower()


def test_dump_lists_chunks_and_records(tmp_path: Path) -> None:
    _stream_with_two_chunks(tmp_path / "s")
    result = _sievemq("storage", "dump", "--records", str(tmp_path / "s"))
    assert result.returncode == 0, result.stderr
    assert "emea" in result.stdout
    assert "orders.new" in result.stdout


def test_help_is_there_for_every_command() -> None:
    for args in (["--help"], ["serve", "--help"], ["storage", "verify", "--help"]):
        result = _sievemq(*args)
        assert result.returncode == 0
        assert "usage:" in result.stdout
