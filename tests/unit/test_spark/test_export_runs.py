"""Incremental Parquet/JSON runs: staging and committed folders found by the next run (no JVM).

The SIGKILL windows with a real Spark export are in tests/spark/test_export_sigkill.py; here
the folders a killed run leaves behind are laid out by hand, including a commit whose files
were only partly moved, which a real kill rarely hits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sievemq.spark.export import (
    COMMIT_PREFIX,
    MANIFEST,
    STAGING_PREFIX,
    finish_runs,
    recover_runs,
)


def committed_run(out: Path, run: str, offsets: object, files: list[str]) -> Path:
    folder = out / f"{COMMIT_PREFIX}{run}"
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text(json.dumps({"version": 1, "offsets": offsets}))
    (folder / "_SUCCESS").write_text("")
    for name in files:
        (folder / name).write_text(name)
    return folder


def visible(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if not p.name.startswith(("_", ".")))


def test_a_run_killed_before_its_commit_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    staging = out / f"{STAGING_PREFIX}abc"
    staging.mkdir(parents=True)
    (staging / "part-0.parquet").write_text("rows nobody may see")
    (out / "part-old.parquet").write_text("an earlier run")
    assert recover_runs(out) is None
    assert not staging.exists()
    assert visible(out) == ["part-old.parquet"]


def test_a_committed_run_is_finished_even_half_moved(tmp_path: Path) -> None:
    out = tmp_path / "out"
    folder = committed_run(out, "r2", {"/": {"s": 150}}, ["part-1.json", "part-2.json"])
    (out / "part-0.json").write_text("part-0.json")  # moved before the kill
    assert recover_runs(out) == {"/": {"s": 150}}
    assert visible(out) == ["part-0.json", "part-1.json", "part-2.json"]
    assert (out / "part-2.json").read_text() == "part-2.json"
    assert recover_runs(out) == {"/": {"s": 150}}  # again: nothing left to move, same answer
    assert visible(out) == ["part-0.json", "part-1.json", "part-2.json"]
    finish_runs(out)
    assert not folder.exists() and recover_runs(out) is None


def test_the_latest_of_several_committed_runs_wins(tmp_path: Path) -> None:
    out = tmp_path / "out"
    committed_run(out, "b", {"/": {"s": 90, "t": 7}}, ["part-b"])
    committed_run(out, "a", {"/": {"s": 120, "t": 7}}, ["part-a"])
    assert recover_runs(out) == {"/": {"s": 120, "t": 7}}
    assert visible(out) == ["part-a", "part-b"]


def test_a_damaged_manifest_is_an_error_naming_the_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    folder = committed_run(out, "x", {"/": {"s": -1}}, ["part-x"])
    with pytest.raises(ValueError, match=f"committed run {folder}: bad manifest"):
        recover_runs(out)
    assert visible(out) == []  # nothing moved from a run it cannot read
