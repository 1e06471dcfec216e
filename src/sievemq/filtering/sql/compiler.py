"""Syntax tree -> one Python function per expression, compiled once per subscription.

The hot path is the generated ``evaluate(m)``: inline three-valued logic and typed fast paths,
falling back to ``runtime`` helpers for coercions. Injection safety: the generated source holds
only names we make up (``_c3``, ``_t1``, ``_g2``), fixed operators and the keywords
True/False/None. Every user-supplied value (header names, literals, LIKE matchers) reaches the
function as a bound constant from a tuple, never as source text, and the function runs with a
builtins table of exactly ``type``, ``str``, ``bool`` and ``Exception``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

from sievemq.filtering.sql import like, runtime
from sievemq.filtering.sql.errors import CompileError
from sievemq.filtering.sql.lexer import MAX_CHARS
from sievemq.filtering.sql.nodes import (
    Arith,
    Between,
    Compare,
    In,
    IsNull,
    Like,
    Literal,
    Logic,
    Negate,
    Node,
    Not,
    Ref,
    StrPredicate,
)
from sievemq.filtering.sql.parser import MAX_NESTING, parse
from sievemq.filtering.sql.view import MessageView

HOIST_DEPTH = 8  # deeper sub-expressions become their own function (keeps source nesting low)

_ORDER_OPS = frozenset({"<", "<=", ">", ">="})
_ARITH_OPS = frozenset({"+", "-", "*", "/"})
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

_GLOBALS: dict[str, object] = {
    "__builtins__": {"type": type, "str": str, "bool": bool, "Exception": Exception},
    "_NUM": runtime.NUM,
    "_NOT3": runtime.NOT3,
    "_eq": runtime.eq,
    "_order": runtime.order,
    "_eq3": runtime.eq3,
    "_ne3": runtime.ne3,
    "_order3": runtime.order3,
    "_arith": runtime.arith,
    "_negate": runtime.negate,
    "_tobool": runtime.to_bool,
    "_in": runtime.in_list,
    "_each": runtime.each_value,
}


class _Generator:
    """Walks the tree once, producing expression source, hoisted helpers and constants."""

    def __init__(self) -> None:
        self.consts: list[object] = []
        self.const_names: dict[tuple[type, object], str] = {}
        self.defs: list[str] = []
        self.temps = 0

    def const(self, value: object) -> str:
        # only scalars are shared: (1, True) == (True, 1) must not merge two IN lists
        key = (type(value), value) if type(value) in (str, int, float) else (object, id(value))
        name = self.const_names.get(key)
        if name is None:
            name = f"_c{len(self.consts)}"
            self.consts.append(value)
            self.const_names[key] = name
        return name

    def temp(self) -> str:
        self.temps += 1
        return f"_t{self.temps}"

    def bind(self, src: str) -> tuple[str, str]:
        """(expression that evaluates src and names it, the name) - src runs exactly once."""
        if src.isidentifier():
            return src, src
        t = self.temp()
        return f"({t} := {src})", t

    def hoist(self, body: str) -> str:
        name = f"_g{len(self.defs)}"
        self.defs.append(f"def {name}(m, _x):\n    return {body}")
        return name

    # -- entry points --------------------------------------------------------------------
    def gen(self, node: Node) -> tuple[str, int]:
        src, depth = self._gen(node)
        if depth > HOIST_DEPTH:
            return f"{self.hoist(src)}(m, _x)", 1
        return src, depth

    def cond(self, node: Node) -> tuple[str, int]:
        """Source yielding True/False/None for a node used as a condition."""
        src, depth = self.gen(node)
        if isinstance(node, Ref):
            t = self.temp()
            return f"({t} if ({t} := {src}) is None or type({t}) is bool else _tobool({t}))", depth
        return src, depth

    # -- nodes ---------------------------------------------------------------------------
    def _gen(self, node: Node) -> tuple[str, int]:
        if isinstance(node, Literal):
            if isinstance(node.value, bool):
                return ("True" if node.value else "False"), 0
            return self.const(node.value), 0
        if isinstance(node, Ref):
            return self.ref(node), 0
        if isinstance(node, Logic):
            return self.logic(node)
        if isinstance(node, Not):
            src, d = self.cond(node.operand)
            return f"_NOT3[{src}]", d + 1
        if isinstance(node, Arith):
            return self.arith(node)
        if isinstance(node, Negate):
            src, d = self.gen(node.operand)
            a, v = self.bind(src)
            return f"(-{v} if type({a}) in _NUM else _negate({v}))", d + 1
        value = node.value if not isinstance(node, Compare) else node.left
        if isinstance(value, Ref) and value.scope == "tags":
            return self.tags_predicate(node)
        vsrc, d = self.gen(value)
        src, d2 = self.predicate(node, vsrc)
        return src, max(d, d2) + 1

    def ref(self, node: Ref) -> str:
        if node.scope == "header":
            return f"m.header({self.const(node.name)})"
        if node.scope == "property":
            return f"m.property({self.const(node.name)})"
        if node.scope == "routing_key":
            return "m.routing_key"
        if node.scope == "exchange":
            return "m.exchange"
        return "_x"  # one TAGS value, inside a per-value function

    def logic(self, node: Logic) -> tuple[str, int]:
        a_src, da = self.cond(node.left)
        b_src, db = self.cond(node.right)
        ta, tb = self.temp(), self.temp()
        if node.op == "AND":
            src = (
                f"(False if ({ta} := {a_src}) is False else "
                f"({tb} if (({tb} := {b_src}) is False or {ta} is True) else None))"
            )
        else:
            src = (
                f"(True if ({ta} := {a_src}) is True else "
                f"({tb} if (({tb} := {b_src}) is True or {ta} is False) else None))"
            )
        return src, max(da, db) + 1

    def arith(self, node: Arith) -> tuple[str, int]:
        l_src, dl = self.gen(node.left)
        r_src, dr = self.gen(node.right)
        op = node.op
        depth = max(dl, dr) + 1
        if op not in _ARITH_OPS:  # '%': SQL remainder, integers only
            return f"_arith({self.const(op)}, {l_src}, {r_src})", depth
        la, lv = self.bind(l_src)
        ra, rv = self.bind(r_src)
        checks = []
        for node_side, a in ((node.left, la), (node.right, ra)):
            if isinstance(node_side, Literal) and type(node_side.value) in runtime.NUM:
                checks.append(f"({a} is not None)")  # evaluates it; a literal number is fine
            else:
                checks.append(f"(type({a}) in _NUM)")
        return (
            f"({lv} {op} {rv} if {checks[0]} & {checks[1]} "
            f"else _arith({self.const(op)}, {lv}, {rv}))",
            depth,
        )

    # -- predicates on one value (a header, an expression, or one TAGS value `_x`) -------
    def predicate(self, node: Node, vsrc: str) -> tuple[str, int]:
        if isinstance(node, Compare):
            return self.compare(node, vsrc)
        if isinstance(node, Between):
            return self.between(node, vsrc)
        if isinstance(node, In):
            return self.in_list(node, vsrc), 0
        if isinstance(node, Like):
            return self.like(node, vsrc), 0
        if isinstance(node, StrPredicate):
            return self.str_predicate(node, vsrc), 0
        assert isinstance(node, IsNull)
        return f"({vsrc} is {'not ' if node.negated else ''}None)", 0

    def compare(self, node: Compare, vsrc: str) -> tuple[str, int]:
        op, right = node.op, node.right
        depth = 0
        if isinstance(node.left, Literal) and not isinstance(right, Literal):
            # constant on the left: swap so the fast paths below apply
            op = _FLIP[op]
            right = node.left
            vsrc, depth = self.gen(node.right)
        if isinstance(right, Literal):
            a, v = self.bind(vsrc)
            return f"(None if {a} is None else {self.compare_const(op, v, right.value)})", depth
        r_src, dr = self.gen(right)
        if op == "=":
            return f"_eq3({vsrc}, {r_src})", dr
        if op == "<>":
            return f"_ne3({vsrc}, {r_src})", dr
        return f"_order3({vsrc}, {r_src}, {self.const(op)})", dr

    def compare_const(self, op: str, v: str, value: object) -> str:
        """``v op constant`` for a non-NULL v: the inline typed fast path, else a helper."""
        c = self.const(value) if type(value) is not bool else ("True" if value else "False")
        if op == "=":
            if type(value) is str:
                return f"({v} == {c} or (type({v}) is not str and _eq({v}, {c})))"
            if type(value) is bool:
                return f"({v} is {c} if type({v}) is bool else _eq({v}, {c}))"
            return f"({v} == {c} if type({v}) in _NUM else _eq({v}, {c}))"
        if op == "<>":
            if type(value) is str:
                return f"({v} != {c} if type({v}) is str else not _eq({v}, {c}))"
            if type(value) is bool:
                return f"({v} is not {c} if type({v}) is bool else not _eq({v}, {c}))"
            return f"({v} != {c} if type({v}) in _NUM else not _eq({v}, {c}))"
        assert op in _ORDER_OPS
        if type(value) in runtime.NUM:
            return f"({v} {op} {c} if type({v}) in _NUM else _order({v}, {c}, {self.const(op)}))"
        return f"_order({v}, {c}, {self.const(op)})"

    def between(self, node: Between, vsrc: str) -> tuple[str, int]:
        a, v = self.bind(vsrc)
        parts = []
        depth = 0
        ops = ("<", ">") if node.negated else (">=", "<=")
        for bound, op in ((node.low, ops[0]), (node.high, ops[1])):
            if isinstance(bound, Literal):
                parts.append(self.compare_const(op, v, bound.value))
            else:
                b_src, d = self.gen(bound)
                depth = max(depth, d)
                parts.append(f"_order3({v}, {b_src}, {self.const(op)})")
        ta, tb = self.temp(), self.temp()
        if node.negated:  # v < low OR v > high
            combined = (
                f"(True if ({ta} := {parts[0]}) is True else "
                f"({tb} if (({tb} := {parts[1]}) is True or {ta} is False) else None))"
            )
        else:  # v >= low AND v <= high
            combined = (
                f"(False if ({ta} := {parts[0]}) is False else "
                f"({tb} if (({tb} := {parts[1]}) is False or {ta} is True) else None))"
            )
        return f"(None if {a} is None else {combined})", depth + 1

    def in_list(self, node: In, vsrc: str) -> str:
        a, v = self.bind(vsrc)
        items = node.items
        neg = "not " if node.negated else ""
        tup = self.const(items)
        if all(type(i) is str for i in items):
            s = self.const(frozenset(items))
            fast = f"{v} {neg}in {s} if type({v}) is str"
        elif all(type(i) in runtime.NUM for i in items):
            s = self.const(frozenset(items))
            fast = f"{v} {neg}in {s} if type({v}) in _NUM"
        else:
            return f"(None if {a} is None else {neg}_in({v}, {tup}))"
        return f"(None if {a} is None else ({fast} else {neg}_in({v}, {tup})))"

    def like(self, node: Like, vsrc: str) -> str:
        pattern = like.compile_pattern(node.pattern, node.escape)
        a, v = self.bind(vsrc)
        if pattern.kind == "any":
            test = "True"
        elif pattern.kind == "equals":
            test = f"{v} == {self.const(pattern.literal)}"
        elif pattern.kind == "prefix":
            test = f"{v}.startswith({self.const(pattern.literal)})"
        elif pattern.kind == "suffix":
            test = f"{v}.endswith({self.const(pattern.literal)})"
        elif pattern.kind == "contains":
            test = f"{self.const(pattern.literal)} in {v}"
        else:
            test = f"{self.const(pattern.match)}({v})"
        neg = "not " if node.negated else ""
        return f"({neg}({test}) if type({a}) is str else None)"

    def str_predicate(self, node: StrPredicate, vsrc: str) -> str:
        if not node.needle:
            return "False"  # RocketMQ: an empty search string never matches, either form
        a, v = self.bind(vsrc)
        n = self.const(node.needle)
        if node.op == "CONTAINS":
            test = f"{n} {'not ' if node.negated else ''}in {v}"
        else:
            method = "startswith" if node.op == "STARTSWITH" else "endswith"
            test = f"{'not ' if node.negated else ''}{v}.{method}({n})"
        return f"({test} if type({a}) is str else False)"

    def tags_predicate(self, node: Node) -> tuple[str, int]:
        """TAGS holds several values: positive forms match ANY, NOT forms need ALL."""
        if isinstance(node, Compare) and isinstance(node.right, Literal):
            c = node.right.value
            if type(c) is str and node.op in ("=", "<>"):
                t = self.temp()
                neg = "not " if node.op == "<>" else ""
                return f"({self.const(c)} {neg}in {t} if ({t} := m.tags) else None)", 1
        if isinstance(node, In) and all(type(i) is str for i in node.items):
            t = self.temp()
            s = self.const(frozenset(node.items))
            neg = "" if node.negated else "not "
            return f"({neg}{s}.isdisjoint({t}) if ({t} := m.tags) else None)", 1
        body, _ = self.predicate(node, "_x")
        fn = self.hoist(body)
        negated = getattr(node, "negated", False) or (isinstance(node, Compare) and node.op == "<>")
        return f"_each({fn}, m, m.tags, {not negated})", 1


class _Compiled(NamedTuple):
    build: Callable[[tuple[object, ...], SqlFilter], Callable[[MessageView], bool]]
    consts: tuple[object, ...]
    source: str
    header_names: frozenset[str]
    property_names: frozenset[str]
    uses_tags: bool
    uses_routing_key: bool
    uses_exchange: bool


def _refs(node: Node) -> list[Ref]:
    out: list[Ref] = []
    stack: list[object] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Ref):
            out.append(n)
        elif hasattr(n, "__slots__"):
            for slot in n.__slots__:
                stack.append(getattr(n, slot))
    return out


@lru_cache(maxsize=256)
def _compile(text: str, max_depth: int) -> _Compiled:
    tree = parse(text, max_depth)
    gen = _Generator()
    src, _ = gen.cond(tree)
    lines = ["def _build(_K, _owner):"]
    lines += [f"    _c{i} = _K[{i}]" for i in range(len(gen.consts))]
    for d in gen.defs:
        lines += ["    " + line for line in d.splitlines()]
    lines += [
        "    def evaluate(m):",
        "        _x = None",
        "        try:",
        f"            return {src} is True",
        "        except Exception:",
        "            _owner.errors += 1",
        "            return False",
        "    return evaluate",
    ]
    source = "\n".join(lines) + "\n"
    namespace = dict(_GLOBALS)
    try:
        code = compile(source, "<sievemq-sql>", "exec")
    except (SyntaxError, RecursionError, MemoryError):  # a nesting limit of CPython's compiler
        raise CompileError(1, "expression is too complex to compile", "limit exceeded") from None
    exec(code, namespace)  # the source holds no user text: see the module docstring
    refs = _refs(tree)
    return _Compiled(
        build=namespace["_build"],  # type: ignore[arg-type]
        consts=tuple(gen.consts),
        source=source,
        header_names=frozenset(r.name for r in refs if r.scope == "header"),
        property_names=frozenset(r.name for r in refs if r.scope == "property"),
        uses_tags=any(r.scope == "tags" for r in refs),
        uses_routing_key=any(r.scope == "routing_key" for r in refs),
        uses_exchange=any(r.scope == "exchange" for r in refs),
    )


class SqlFilter:
    """A compiled ``x-stream-filter-sql`` expression; ``evaluate`` is the hot-path call.

    ``evaluate(message)`` is True only when the expression is TRUE; an evaluation error
    (e.g. division by zero) gives False and increments ``errors``; it never raises.
    """

    __slots__ = (
        "errors",
        "evaluate",
        "header_names",
        "property_names",
        "python_source",
        "text",
        "uses_exchange",
        "uses_routing_key",
        "uses_tags",
    )

    evaluate: Callable[[MessageView], bool]

    def __init__(self, text: str, compiled: _Compiled) -> None:
        self.text = text
        self.errors = 0
        self.header_names = compiled.header_names
        self.property_names = compiled.property_names
        self.uses_tags = compiled.uses_tags
        self.uses_routing_key = compiled.uses_routing_key
        self.uses_exchange = compiled.uses_exchange
        self.python_source = compiled.source  # for debugging: what evaluate runs
        self.evaluate = compiled.build(compiled.consts, self)

    def __repr__(self) -> str:
        return f"SqlFilter({self.text!r}, errors={self.errors})"


def compile_filter(
    text: str, max_length: int = MAX_CHARS, max_depth: int = MAX_NESTING
) -> SqlFilter:
    """Compile an expression once (cached by text); raise CompileError when it is invalid.

    ``max_length`` and ``max_depth`` (settings max_sql_length, max_sql_depth) may lower the
    compiler's own caps, MAX_CHARS characters and MAX_NESTING levels, never raise them."""
    if len(text) > max_length:
        raise CompileError(
            max_length + 1,
            f"expression is longer than {max_length} characters (limit max_sql_length)",
            "limit exceeded",
        )
    return SqlFilter(text, _compile(text, max_depth))
