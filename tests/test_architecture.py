"""The dependency rules of docs/architecture.md, checked by parsing every import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "sievemq"

# component -> top-level modules (or sievemq subpackages) it may import besides the stdlib
ALLOWED: dict[str, set[str]] = {
    "amqp": {"pamqp", "sievemq.amqp"},
    # the RabbitMQ Stream protocol: frames, osiris chunks, AMQP 1.0 and its 0-9-1 conversion
    "streamproto": {"pamqp", "zstandard", "sievemq.streamproto", "sievemq.amqp"},
    "storage": {"mmh3", "zstandard", "sievemq.storage"},
    # pamqp.commands: cold methods are pamqp objects (codec.decode_method/encode_method)
    # filtering: the dialect every reader shares; amqp.codec until the property reader is split out
    "filtering": {"sievemq.filtering", "sievemq.storage", "sievemq.amqp.codec"},
    "gateway": {
        "sievemq.amqp",
        "sievemq.storage",
        "sievemq.filtering",
        "sievemq.gateway",
        "sievemq.streamproto",
        "uvloop",
        "pamqp.commands",
    },
    "admin_api": {
        "fastapi",
        "pydantic",
        "starlette",
        "sievemq.admin_api",
        "sievemq.gateway.facade",
    },
    "spark": {"pyspark", "pyarrow", "sievemq.storage", "sievemq.spark"},
}


# wiring modules inside a component: they may import like sievemq.cli (everything)
WIRING: set[str] = {"serve.py"}

# stdlib modules a component must not use even though they are in the standard library
FORBIDDEN: dict[str, set[str]] = {
    "amqp": {"asyncio", "socket", "selectors"},
    "streamproto": {"asyncio", "socket", "selectors"},
    "storage": {"asyncio", "socket", "selectors"},
    "filtering": {"asyncio", "socket", "selectors"},
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _allowed(name: str, allowed: set[str], forbidden: frozenset[str] = frozenset()) -> bool:
    import sys

    top = name.split(".")[0]
    if top in forbidden:
        return False
    if top in sys.stdlib_module_names or top == "__future__":
        return True
    return any(name == a or name.startswith(a + ".") for a in allowed)


@pytest.mark.parametrize("component", sorted(ALLOWED))
def test_component_imports_only_what_the_design_allows(component: str) -> None:
    files = sorted((SRC / component).rglob("*.py"))
    assert files, f"component {component} has no modules"
    bad = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in files
        if path.relative_to(SRC).as_posix() not in WIRING
        for name in _imports(path)
        if not _allowed(name, ALLOWED[component], frozenset(FORBIDDEN.get(component, ())))
    ]
    assert not bad, "dependency rule broken:\n" + "\n".join(bad)


def test_only_gateway_net_opens_sockets() -> None:
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if "socket" in _imports(path) and "gateway/net" not in path.as_posix()
    ]
    assert not offenders, f"socket code outside gateway/net: {offenders}"


def test_the_rule_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio\nfrom sievemq.gateway import broker\n")
    names = _imports(bad)
    storage_rules = (ALLOWED["storage"], frozenset(FORBIDDEN["storage"]))
    assert not _allowed(names[0], *storage_rules)
    assert not _allowed(names[1], *storage_rules)
