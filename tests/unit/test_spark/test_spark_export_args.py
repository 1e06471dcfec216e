"""`sievemq export` flags -> source options, and its progress bar text (no JVM)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest

from sievemq.spark.export import _bar, add_arguments, source_options
from sievemq.spark.options import OptionError, parse_options


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([*argv, "--stream", "s", "--out", "o"])


def test_flags_map_to_source_options() -> None:
    opts = source_options(
        _args("--filter", "a,b", "--match-unfiltered", "--from", "10", "--to", "2024-01-01"),
        Path("/d"),
    )
    assert opts == {
        "path": "/d",
        "stream": "s",
        "vhost": "/",
        "filterValues": "a,b",
        "matchUnfiltered": "true",
        "startingOffsets": "10",
        "endingTimestamp": "1704067200000",
    }
    parse_options(opts)  # what the command builds, the source accepts
    by_time = source_options(_args("--from", "2024-01-01T00:00:01Z", "--to", "99"), Path("/d"))
    assert by_time["startingTimestamp"] == "1704067201000" and by_time["endingOffsets"] == "99"
    with pytest.raises(OptionError, match="option '--from'"):
        source_options(_args("--from", "tomorrow"), Path("/d"))


def test_progress_bar_shows_done_total_rate_and_eta() -> None:
    text = _bar(250, 1000, time.monotonic() - 1.0, width=10)
    assert text.startswith("\r[##........] 250/1,000 messages ")
    assert "rows/s" in text and "ETA " in text and not text.endswith("ETA -")
    assert _bar(1000, 1000, time.monotonic() - 1.0).endswith("ETA -")


def test_incremental_refuses_to_and_overwrite(tmp_path: Path) -> None:
    import io

    from sievemq.spark.export import run_export

    for extra in (["--to", "5"], ["--overwrite"]):
        err = io.StringIO()
        args = _args("--incremental", str(tmp_path / "ck"), *extra)
        assert run_export(args, io.StringIO(), err) == 2
        assert "--incremental goes with neither --to nor --overwrite" in err.getvalue()
