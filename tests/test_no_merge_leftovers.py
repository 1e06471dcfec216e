"""No file of the repository keeps the markers of a merge conflict (they are easy to commit in
a big Markdown table, and nothing else would notice)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_CHECKED = {".py", ".md", ".toml", ".yml", ".yaml", ".js", ".html", ".css", ".sh", ".go", ".json"}
_SKIPPED = {".git", ".venv", ".tools", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}


def _files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        if any(part in _SKIPPED for part in path.relative_to(ROOT).parts):
            continue
        if path.is_file() and (path.suffix in _CHECKED or path.name == "Makefile"):
            found.append(path)
    return found


def test_no_conflict_markers() -> None:
    bad = []
    for path in _files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if line.startswith(("<<<<<<< ", ">>>>>>> ")):
                bad.append(f"{path.relative_to(ROOT)}:{number}: {line[:40]}")
    assert bad == []
