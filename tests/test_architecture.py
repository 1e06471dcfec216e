"""The dependency rules of docs/architecture.md, checked by parsing every import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "sievemq"

# component -> top-level modules (or sievemq subpackages) it may import besides the stdlib
ALLOWED: dict[str, set[str]] = {
    "amqp": {"pamqp", "sievemq.amqp"},
    "storage": {"mmh3", "zstandard", "sievemq.storage"},
    # pamqp.commands: cold methods are pamqp objects (codec.decode_method/encode_method)
    # filtering: the dialect every reader shares; amqp.codec until the property reader is split out
    "filtering": {"sievemq.filtering", "sievemq.storage", "sievemq.amqp.codec"},
    "gateway": {
        "sievemq.amqp",
        "sievemq.storage",
        "sievemq.filtering",
        "sievemq.gateway",
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


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``root`` it imports: every import statement anywhere in the
    file (module level, under ``if TYPE_CHECKING``, inside functions), relative ones
    resolved; ``from pkg import name`` counts as ``pkg.name`` when that is a module."""
    files = {_module_name(path, root): path for path in root.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in files else known(base))
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_in_src() -> None:
    graph = _import_graph(SRC)
    assert "sievemq.gateway.session.channel" in graph["sievemq.gateway.session.connection"]
    cycles = _cycles(graph)
    assert not cycles, "import circles (TYPE_CHECKING and local imports count):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_the_circle_finder_sees_type_checking_and_local_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "sievemq"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from sievemq.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n"
    )
    (pkg / "sub" / "c.py").write_text("def f() -> None:\n    from ..a import x\n")
    (pkg / "d.py").write_text("import sievemq.a\n")
    graph = _import_graph(pkg)
    assert graph["sievemq.sub.b"] == {"sievemq.sub.c"}
    assert graph["sievemq.sub.c"] == {"sievemq.a"}
    assert _cycles(graph) == [["sievemq.a", "sievemq.sub.b", "sievemq.sub.c"]]


def test_the_rule_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio\nfrom sievemq.gateway import broker\n")
    names = _imports(bad)
    storage_rules = (ALLOWED["storage"], frozenset(FORBIDDEN["storage"]))
    assert not _allowed(names[0], *storage_rules)
    assert not _allowed(names[1], *storage_rules)
