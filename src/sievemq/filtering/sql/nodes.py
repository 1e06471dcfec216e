"""The syntax tree the parser builds and the code generator reads (cold path).

``pos`` is the 1-based character position of the node's first token, for error messages.
"""

from __future__ import annotations

from dataclasses import dataclass

Constant = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Literal:
    value: Constant
    pos: int


@dataclass(frozen=True, slots=True)
class Ref:
    scope: str  # "header" | "property" | "tags" | "routing_key" | "exchange"
    name: str
    pos: int


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Arith:
    op: str  # + - * / %
    left: Node
    right: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # = <> < <= > >=  ('!=' is normalized to '<>')
    left: Node
    right: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Between:
    value: Node
    low: Node
    high: Node
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class In:
    value: Node
    items: tuple[Constant, ...]
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class Like:
    value: Node
    pattern: str
    escape: str | None
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class StrPredicate:
    op: str  # CONTAINS | STARTSWITH | ENDSWITH
    value: Node
    needle: str
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class IsNull:
    value: Node
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Logic:
    op: str  # AND | OR
    left: Node
    right: Node
    pos: int


Node = (
    Literal
    | Ref
    | Negate
    | Arith
    | Compare
    | Between
    | In
    | Like
    | StrPredicate
    | IsNull
    | Not
    | Logic
)

CONDITIONS = (Compare, Between, In, Like, StrPredicate, IsNull, Not, Logic)


def is_condition(node: Node) -> bool:
    """True for nodes that yield TRUE/FALSE/UNKNOWN (and may stand where a condition is due)."""
    return isinstance(node, CONDITIONS) or (
        isinstance(node, Literal) and isinstance(node.value, bool)
    )
