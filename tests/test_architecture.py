"""The dependency rules of docs/architecture.md, checked by parsing every import.

Also draws the pictures of the tree that the docs show and fails when a drawn one is stale:
the package arrows in docs/architecture.md (from the imports) and the layout in the README and
docs/architecture.md (from each package's docstring summary line). To redraw them after an
intended change: ``make docs`` (it runs this file as a script).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "sievemq"
ROOT = SRC.parents[1]
DOC = ROOT / "docs" / "architecture.md"
README = ROOT / "README.md"
PICTURE_BEGIN = "<!-- packages:begin (make docs draws this from the imports) -->"
PICTURE_END = "<!-- packages:end -->"
LAYOUT_BEGIN = "<!-- layout:begin (make docs draws this from the docstrings) -->"
LAYOUT_END = "<!-- layout:end -->"

# component (a folder or a module of src/sievemq) -> what it may import besides the stdlib:
# top-level distributions, or sievemq modules and packages (a prefix covers what is inside).
# A nested component (gateway/model) obeys its own rule AND its parent's (gateway).
ALLOWED: dict[str, set[str]] = {
    "amqp": {"pamqp", "sievemq.amqp"},
    # the RabbitMQ Stream protocol: frames, osiris chunks, AMQP 1.0 and its 0-9-1 conversion
    "streamproto": {"pamqp", "zstandard", "isal", "sievemq.streamproto", "sievemq.amqp"},
    "storage": {"mmh3", "zstandard", "isal", "sievemq.storage"},
    # the dialect every reader shares (gateway, Spark): storage and the AMQP property reader
    "filtering": {"sievemq.filtering", "sievemq.storage", "sievemq.amqp.properties"},
    "gateway": {
        "sievemq.amqp",
        "sievemq.storage",
        "sievemq.filtering",
        "sievemq.gateway",
        "sievemq.streamproto",
        "sievemq.units",
        "uvloop",
        # cold methods are pamqp objects (codec.decode_method/encode_method)
        "pamqp.commands",
    },
    # the broker model: no session, runtime, network or admin facade
    "gateway/model": {"sievemq.amqp", "sievemq.storage", "sievemq.gateway.model"},
    # the node and its appenders: below the session, never a connection or a socket
    "gateway/runtime": {
        "sievemq.amqp",
        "sievemq.storage",
        "sievemq.filtering",
        "sievemq.gateway.model",
        "sievemq.gateway.runtime",
        "sievemq.units",
    },
    # the only socket code: frames in, frames out; what a method means is the session's
    "gateway/net": {
        "sievemq.amqp.errors",
        "sievemq.amqp.frames",
        "sievemq.streamproto.wire",
        "sievemq.gateway.net",
    },
    "admin_api": {
        "fastapi",
        "pydantic",
        "starlette",
        "prometheus_client",
        "sievemq.admin_api",
        # the admin seam: its views and the facade, never a section's internals
        "sievemq.gateway.admin.views",
        "sievemq.gateway.admin.facade",
    },
    # the sink publishes through the gateway as an AMQP client (spark/publisher.py on
    # pamqp's frame codec), never by its code
    "spark": {
        "pyspark",
        "pyarrow",
        "pamqp",
        "deltalake",  # `sievemq export --format delta` (delta-rs; delta-spark cannot work offline)
        "sievemq.storage",
        "sievemq.filtering",
        "sievemq.spark",
        # the network mode's Stream-protocol client (spark/stream_client.py): frames only
        "sievemq.streamproto.wire",
    },
    # the cluster (docs/cluster.md): etcd through httpx in cluster/coordination.py only; it may
    # use storage, the stream protocol and the gateway's types; nothing else imports it but
    # the wiring (serve.py, cli.py) and testing
    "cluster": {
        "httpx",
        "sievemq.cluster",
        "sievemq.storage",
        "sievemq.streamproto",
        "sievemq.gateway",
        # the inter-node link (cluster/link.py) speaks AMQP 0-9-1 on the project's codec
        "sievemq.amqp",
        "pamqp.commands",
    },
    # `sievemq publish` / `sievemq tail`: an AMQP client of the server, never its code
    # `sievemq streams add_replica ...`: an HTTP client of the admin API, never its code
    "client": {"aiormq", "pamqp", "httpx", "sievemq.client"},
    # settings are built at the edge and passed down: they never import the gateway
    "settings.py": {"pydantic", "pydantic_settings", "sievemq.units"},
    "units.py": set(),
    # testing is wiring for tests (like serve.py): the whole gateway, its admin app, the
    # frame codec of the raw client; never a test framework. The client libraries only in the
    # one module each that drives them (TESTING_CLIENTS, checked below)
    "testing": {"sievemq", "pamqp", "uvicorn", "pika", "rstream", "aiormq", "httpx"},
}

# the modules of sievemq.testing that drive a client library, each its own only: importing
# sievemq.testing (or its other modules) needs none of them
TESTING_CLIENTS: dict[str, str] = {
    "testing/pika_client.py": "pika",
    "testing/stream_client.py": "rstream",
    "testing/aiormq_client.py": "aiormq",
    "testing/admin_client.py": "httpx",
}

# stdlib modules a component must not use even though they are in the standard library
FORBIDDEN: dict[str, set[str]] = {
    "amqp": {"asyncio", "socket", "selectors"},
    "streamproto": {"asyncio", "socket", "selectors"},
    "storage": {"asyncio", "socket", "selectors"},
    "filtering": {"asyncio", "socket", "selectors"},
    "gateway/model": {"asyncio", "socket", "selectors"},
    "units.py": {"asyncio", "socket", "selectors", "os"},
}


def _module_of(path: Path, root: Path = SRC) -> tuple[str, str]:
    """(the module's dotted name, its package) for a file under ``root``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def _imports(path: Path, root: Path = SRC) -> list[str]:
    """Every name imported anywhere in the file (module level, ``TYPE_CHECKING``, functions);
    relative imports resolved; ``from pkg import name`` gives ``pkg.name``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_of(path, root)[1] if path.is_relative_to(root.parent) else ""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base == "__future__":
                names.append(base)
            else:
                names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names


def _files(component: str) -> list[Path]:
    target = SRC / component
    return [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))


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
    files = _files(component)
    assert files and all(f.exists() for f in files), f"component {component} has no modules"
    bad = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in files
        for name in _imports(path)
        if not _allowed(name, ALLOWED[component], frozenset(FORBIDDEN.get(component, ())))
    ]
    assert not bad, "dependency rule broken:\n" + "\n".join(bad)


# where sockets may be opened: the server's listeners, the raw test client, the Spark sink's
# publisher (a client of the gateway over AMQP, in a Spark task; it replaced aiormq), the Spark
# source's network mode (a Stream-protocol client, in a Spark task) and `sievemq cluster up`'s
# launcher (a free port for the etcd it starts)
SOCKET_CODE = (
    "gateway/net/",
    "testing/",
    "spark/publisher.py",
    "spark/stream_client.py",
    "cluster/local.py",
)


# One naming rule for the queue families: what only stream queues use lives in
# gateway/<layer>/stream/, what only classic and quorum queues use in gateway/<layer>/classic/,
# what both share at gateway/<layer>/ itself.
FAMILY_LAYERS = ("model", "session", "runtime")
FAMILIES = ("stream", "classic")
# the one thing a family takes from the other: a dead-letter a classic queue routes to a stream
# is indexed by the same x-stream-filter-value rule as a publish
CROSS_FAMILY = {"sievemq.gateway.model.stream.arguments.parse_filter_values"}


def test_queue_family_modules_live_in_their_family_package() -> None:
    flat = [
        str(path.relative_to(SRC))
        for layer in FAMILY_LAYERS
        for path in (SRC / "gateway" / layer).glob("*.py")
        if path.stem.startswith(tuple(f"{family}_" for family in (*FAMILIES, "quorum")))
    ]
    assert not flat, f"family modules outside gateway/<layer>/<family>/: {flat}"
    for layer in FAMILY_LAYERS:
        for family in FAMILIES:
            assert (SRC / "gateway" / layer / family / "__init__.py").exists()


def test_queue_families_do_not_import_each_other() -> None:
    bad = [
        f"{path.relative_to(SRC)} imports {name}"
        for layer in FAMILY_LAYERS
        for family, other in (FAMILIES, FAMILIES[::-1])
        for path in sorted((SRC / "gateway" / layer / family).rglob("*.py"))
        for name in _imports(path)
        if name.split(".")[:2] == ["sievemq", "gateway"]
        and name.split(".")[3:4] == [other]
        and name not in CROSS_FAMILY
    ]
    assert not bad, "a queue family imports the other one:\n" + "\n".join(bad)


def _is_module(dotted: str) -> bool:
    path = SRC.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _sievemq_aliases(path: Path) -> list[tuple[str, str]]:
    """(module name, the name it is bound to) of every aliased import of a sievemq module."""
    found: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            for alias in node.names:
                full = f"{module}.{alias.name}" if module else alias.name
                if alias.asname and full.startswith("sievemq.") and _is_module(full):
                    found.append((full.rpartition(".")[2], alias.asname))
    return found


def _keeps_the_name(name: str, alias: str) -> bool:
    """``x``, ``_x``, ``x`` without its leading underscore, ``<qualifier>_x`` (two same-named
    modules of two families, ``classic_consumer``), or ``x_module`` (beside a fixture ``x``)."""
    return alias in (name, f"_{name}", name.lstrip("_"), f"{name}_module") or alias.endswith(
        f"_{name}"
    )


def test_import_aliases_keep_the_real_name() -> None:
    root = SRC.parents[1]
    files = [
        path
        for folder in (SRC, root / "tests", root / "bench")
        for path in sorted(folder.rglob("*.py"))
        if "node_modules" not in path.parts
    ]
    bad = [
        f"{path.relative_to(root)}: {name} as {alias}"
        for path in files
        for name, alias in _sievemq_aliases(path)
        if not _keeps_the_name(name, alias)
    ]
    assert not bad, "an import alias hides the module's name:\n" + "\n".join(bad)
    assert ("consumer", "classic_consumer") in _sievemq_aliases(SRC / "gateway/session/channel.py")


def test_the_alias_rule_refuses_a_nickname() -> None:
    assert _keeps_the_name("consumer", "classic_consumer")
    assert _keeps_the_name("properties", "amqp_properties")
    assert not _keeps_the_name("arguments", "qargs")
    assert not _keeps_the_name("publish_cache", "fastpath")


def test_only_gateway_net_opens_sockets() -> None:
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if "socket" in {name.split(".")[0] for name in _imports(path)}
        and not path.relative_to(SRC).as_posix().startswith(SOCKET_CODE)
    ]
    assert not offenders, f"socket code outside gateway/net: {offenders}"


# a single node imports nothing of the cluster: only the wiring, behind --cluster-etcd
CLUSTER_USERS = ("cluster/", "serve.py", "cli.py", "testing/")


def test_only_the_wiring_imports_the_cluster() -> None:
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if any(name.startswith("sievemq.cluster") for name in _imports(path))
        and not path.relative_to(SRC).as_posix().startswith(CLUSTER_USERS)
    ]
    assert not offenders, f"the cluster imported outside the wiring: {offenders}"


def _import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``root`` it imports: every import statement anywhere in the
    file (module level, under ``if TYPE_CHECKING``, inside functions), relative ones
    resolved; ``from pkg import name`` counts as ``pkg.name`` when that is a module."""
    files = {_module_of(path, root)[0]: path for path in root.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = {known(name) for name in _imports(path, root)}
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


def test_each_client_library_is_imported_by_its_testing_module_only() -> None:
    libraries = set(TESTING_CLIENTS.values())
    offenders = [
        f"{rel} imports {name}"
        for path in (SRC / "testing").rglob("*.py")
        for rel in [path.relative_to(SRC).as_posix()]
        for name in _imports(path)
        if name.split(".")[0] in libraries and name.split(".")[0] != TESTING_CLIENTS.get(rel)
    ]
    assert not offenders, "a client library outside its sievemq.testing module:\n" + "\n".join(
        offenders
    )


def test_nothing_in_the_product_imports_the_test_helpers() -> None:
    offenders = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in SRC.rglob("*.py")
        if not path.relative_to(SRC).as_posix().startswith("testing/")
        for name in _imports(path)
        if name == "sievemq.testing" or name.startswith("sievemq.testing.")
    ]
    assert not offenders, "sievemq.testing is for tests only:\n" + "\n".join(offenders)


def test_the_rule_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio\nfrom sievemq.gateway import broker\n")
    names = _imports(bad)
    storage_rules = (ALLOWED["storage"], frozenset(FORBIDDEN["storage"]))
    assert not _allowed(names[0], *storage_rules)
    assert not _allowed(names[1], *storage_rules)


def test_the_contracts_refuse_what_the_layout_forbids() -> None:
    model = ALLOWED["gateway/model"]
    assert not _allowed("sievemq.gateway.session.channel.Channel", model)
    assert not _allowed("sievemq.gateway.runtime.node", model)
    assert not _allowed("sievemq.gateway.net.protocol", model)
    assert not _allowed("sievemq.gateway.admin", model)
    assert not _allowed("sievemq.gateway.session.connection", ALLOWED["gateway/runtime"])
    assert not _allowed("sievemq.gateway.runtime.alarms.parse_size", ALLOWED["settings.py"])
    assert not _allowed("sievemq.gateway.model.broker", ALLOWED["admin_api"])
    assert _allowed("sievemq.gateway.admin.facade.BrokerFacade", ALLOWED["admin_api"])
    assert _allowed("sievemq.gateway.admin.views.StreamView", ALLOWED["admin_api"])
    assert not _allowed("sievemq.gateway.admin.queues", ALLOWED["admin_api"])
    assert not _allowed("sievemq.gateway", ALLOWED["spark"])
    assert not _allowed("sievemq.amqp.states", ALLOWED["filtering"])


def test_relative_and_local_imports_are_seen(tmp_path: Path) -> None:
    root = tmp_path / "sievemq"
    (root / "filtering").mkdir(parents=True)
    module = root / "filtering" / "x.py"
    module.write_text("def f() -> None:\n    from ..gateway import node\n")
    assert _imports(module, root) == ["sievemq.gateway.node"]


def _package(module: str) -> str:
    """The box a module is drawn in: its package below sievemq (gateway's one level deeper),
    or the top-level module itself (cli, serve, settings, ...)."""
    parts = module.split(".")[1:]
    if parts[:1] == ["gateway"] and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0] if parts else "sievemq"


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in _import_graph(SRC).items():
        arrows = graph.setdefault(_package(module), set())
        arrows.update(_package(t) for t in targets)
    for package, arrows in graph.items():
        arrows.discard(package)
    # the bare containers (sievemq/__init__, gateway/__init__) only when they import something
    return {p: a for p, a in graph.items() if a or p not in {"sievemq", "gateway"}}


def draw_packages() -> str:
    """Every package with its arrows, those that import the most layers first."""
    graph = _package_graph()
    depth: dict[str, int] = {}

    def layer(package: str) -> int:
        if package not in depth:
            depth[package] = 1 + max((layer(t) for t in graph.get(package, ())), default=-1)
        return depth[package]

    order = sorted(graph, key=lambda p: (-layer(p), p))
    width = max(len(p) for p in order)
    none = "(stdlib and libraries only)"
    lines = [f"{p.ljust(width)}  -> {', '.join(sorted(graph[p])) or none}" for p in order]
    return "\n".join(["```text", *lines, "```"])


def _summary(path: Path) -> str:
    """The summary line of a module's docstring (its first line)."""
    doc = ast.get_docstring(ast.parse(path.read_text(), filename=str(path)))
    assert doc, f"{path.relative_to(ROOT)} needs a docstring: the layout shows its first line"
    return doc.splitlines()[0].strip()


def _entries(folder: Path) -> list[tuple[str, str, Path]]:
    """(name, summary line, path) of the packages and modules of one folder of src/."""
    found = []
    for path in sorted(folder.iterdir()):
        if path.is_dir() and (path / "__init__.py").exists():
            found.append((path.name + "/", _summary(path / "__init__.py"), path))
        elif path.suffix == ".py" and path.name != "__init__.py":
            found.append((path.name, _summary(path), path))
    return found


def draw_layout() -> str:
    """The boxes of the package picture as a tree, each with its docstring's summary line:
    the packages and modules of src/sievemq, and those of gateway/ one level deeper."""
    rows: list[tuple[str, str]] = []
    for name, summary, path in _entries(SRC):
        rows.append(("  " + name, summary))
        if name == "gateway/":
            rows.extend(("    " + inner, text) for inner, text, _ in _entries(path))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name.ljust(width)}  {summary}" for name, summary in rows]
    return "\n".join(["```text", "src/sievemq/", *lines, "```"])


def _between(text: str, begin: str, end: str) -> str:
    start = text.index(begin) + len(begin)
    return text[start : text.index(end)].strip()


def _redraw(path: Path, begin: str, end: str, picture: str) -> None:
    text = path.read_text()
    start = text.index(begin) + len(begin)
    path.write_text(text[:start] + "\n" + picture + "\n" + text[text.index(end) :])


def test_the_package_picture_in_the_docs_is_the_real_import_graph() -> None:
    drawn = _between(DOC.read_text(), PICTURE_BEGIN, PICTURE_END)
    assert drawn == draw_packages(), (
        "docs/architecture.md's package picture differs from the imports; if the change is "
        "intended, redraw it: make docs"
    )


@pytest.mark.parametrize("doc", [README, DOC], ids=["README.md", "docs/architecture.md"])
def test_the_layout_in_the_docs_is_the_real_tree(doc: Path) -> None:
    drawn = _between(doc.read_text(), LAYOUT_BEGIN, LAYOUT_END)
    assert drawn == draw_layout(), (
        f"{doc.relative_to(ROOT)}'s layout differs from src/ (a package added, moved or its "
        "docstring changed); redraw it: make docs"
    )


def test_the_layout_names_every_package() -> None:
    layout = draw_layout()
    for name in ("streamproto/", "gateway/", "streamproto_session/", "admin_api/", "testing/"):
        assert f" {name} " in layout, name


def _defined_names() -> set[str]:
    """Every class, function and module-level name defined in src/ (for the flow picture)."""
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
    return names


def _flow_picture() -> str:
    """The hand-drawn data-flow picture: the first code block of docs/architecture.md."""
    text = DOC.read_text()
    start = text.index("```\n") + 4
    return text[start : text.index("```", start)]


def test_the_flow_picture_names_only_what_exists() -> None:
    """The flow picture at the top of docs/architecture.md is drawn by hand, so it is checked
    instead: every dotted component (``gateway.session``) is a module or package of src/, and
    every CamelCase name (``StreamConsumer``) is a class or function defined there."""
    picture = _flow_picture()
    dotted = {
        name.removeprefix("sievemq.")
        for name in re.findall(r"\b[a-z_]+(?:\.[a-z_]+)+\b", picture)
        if name != "serve.py"
    }
    missing = [
        name
        for name in sorted(dotted)
        if not (SRC / name.replace(".", "/")).is_dir()
        and not (SRC / (name.replace(".", "/") + ".py")).exists()
    ]
    defined = _defined_names()
    camel = set(re.findall(r"\b[A-Z][a-z]+(?:[A-Z][a-z]+)+\b", picture)) - {"PySpark"}
    camel |= set(re.findall(r"\b(?:Connection|Channel|Node)\b", picture))
    missing += [name for name in sorted(camel) if name not in defined]
    assert not missing, (
        "docs/architecture.md's flow picture names what src/ no longer has: "
        + ", ".join(missing)
        + " (update the picture by hand)"
    )


def test_the_picture_shows_every_arrow() -> None:
    picture = draw_packages()
    session = next(line for line in picture.splitlines() if line.startswith("gateway.session"))
    assert "gateway.runtime" in session and "gateway.model" in session
    model = next(line for line in picture.splitlines() if line.startswith("gateway.model"))
    assert "gateway.session" not in model and "gateway.runtime" not in model


def redraw_all() -> None:
    """``make docs``: the package arrows and the layouts, in place between their markers."""
    _redraw(DOC, PICTURE_BEGIN, PICTURE_END, draw_packages())
    layout = draw_layout()
    for doc in (README, DOC):
        _redraw(doc, LAYOUT_BEGIN, LAYOUT_END, layout)
    print(draw_packages())
    print(layout)


if __name__ == "__main__":
    redraw_all()
