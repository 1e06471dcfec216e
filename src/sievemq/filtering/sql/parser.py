"""Recursive-descent parser: tokens -> syntax tree, with every compile-time check (cold path).

Precedence, lowest first: OR, AND, NOT, comparison (= <> != < <= > >= IS BETWEEN IN LIKE
CONTAINS STARTSWITH ENDSWITH, not chainable), + -, * / %, unary + -. Unlike RocketMQ, NOT is
below comparison (``NOT a = 4`` is ``NOT (a = 4)``, as in SQL) and input after a complete
expression is an error instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Callable

from sievemq.filtering.sql import like
from sievemq.filtering.sql.errors import CompileError
from sievemq.filtering.sql.lexer import Kind, Token, tokenize
from sievemq.filtering.sql.nodes import (
    Arith,
    Between,
    Compare,
    Constant,
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
    is_condition,
)
from sievemq.filtering.sql.runtime import parse_number

MAX_NESTING = 64  # parentheses, NOT and unary signs; keeps recursion far from Python's limit

_COMPARE_OPS = frozenset({"=", "<>", "!=", "<", "<=", ">", ">="})
_PREDICATE_KEYWORDS = frozenset({"BETWEEN", "IN", "LIKE", "CONTAINS", "STARTSWITH", "ENDSWITH"})
_STRING_PREDICATES = frozenset({"CONTAINS", "STARTSWITH", "ENDSWITH"})
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def parse(text: str, max_depth: int = MAX_NESTING) -> Node:
    """Parse a whole expression; it must be a condition and nothing may follow it.

    ``max_depth`` (at most MAX_NESTING) lowers the nesting limit (setting max_sql_depth)."""
    return _Parser(tokenize(text), min(max_depth, MAX_NESTING)).parse_all()


def _describe(node: Node) -> str:
    if isinstance(node, Literal):
        if isinstance(node.value, str):
            return f"string {node.value!r}"
        return f"number {node.value}"
    if isinstance(node, Ref):
        return "TAGS" if node.scope == "tags" else f"name {node.name}"
    return "an arithmetic expression"


class _Parser:
    def __init__(self, tokens: list[Token], max_depth: int = MAX_NESTING) -> None:
        self.tokens = tokens
        self.i = 0
        self.depth = 0
        self.max_depth = max_depth

    # -- token helpers -------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def after(self) -> str:
        """`` after 'X'`` naming the previous token, for 'expected ...' messages."""
        if self.i == 0:
            return ""
        prev = self.tokens[self.i - 1]
        if prev.kind in (Kind.OP, Kind.KEYWORD):
            return f" after '{prev.text}'"
        return f" after {prev.describe()}"

    def advance(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind is not Kind.END:
            self.i += 1
        return tok

    def is_kw(self, *words: str) -> bool:
        return self.tok.kind is Kind.KEYWORD and self.tok.text in words

    def is_op(self, *ops: str) -> bool:
        return self.tok.kind is Kind.OP and self.tok.text in ops

    def fail(self, expected: str) -> CompileError:
        return CompileError(
            self.tok.pos, f"expected {expected}{self.after()} but found {self.tok.describe()}"
        )

    def nest(self, pos: int) -> None:
        self.depth += 1
        if self.depth > self.max_depth:
            raise CompileError(
                pos,
                f"expression is nested more than {self.max_depth} levels deep "
                "(limit max_sql_depth)",
                "limit exceeded",
            )

    # -- checks --------------------------------------------------------------------------
    def condition(self, node: Node, where: str) -> Node:
        """A node standing where TRUE/FALSE/UNKNOWN is due (a bare header is cast)."""
        if is_condition(node) or (isinstance(node, Ref) and node.scope != "tags"):
            return node
        raise CompileError(node.pos, f"expected a condition{where} but found {_describe(node)}")

    def scalar(self, node: Node, role: str) -> Node:
        """A node used as one value: TAGS (several values) may not stand here."""
        if isinstance(node, Ref) and node.scope == "tags":
            raise CompileError(
                node.pos,
                f"TAGS cannot be {role}: test it with =, <>, IN, LIKE, BETWEEN, IS NULL, "
                "CONTAINS, STARTSWITH or ENDSWITH",
            )
        return node

    # -- grammar -------------------------------------------------------------------------
    def parse_all(self) -> Node:
        if self.tokens[0].kind is Kind.END:
            raise CompileError(1, "empty expression: expected a condition")
        node = self.condition(self.parse_or(), "")
        rest = self.tok
        if rest.kind is not Kind.END:
            raise CompileError(
                rest.pos, f"expected AND, OR or end of expression but found {rest.describe()}"
            )
        return node

    def parse_or(self) -> Node:
        return self._logic("OR", self.parse_and)

    def parse_and(self) -> Node:
        return self._logic("AND", self.parse_not)

    def _logic(self, keyword: str, operand: Callable[[], Node]) -> Node:
        """``operand (keyword operand)*``, left-associative: one level of OR or AND."""
        left = operand()
        while self.is_kw(keyword):
            op = self.advance()
            left = self.condition(left, f" before '{keyword}'")
            right = self.condition(operand(), f" after '{keyword}'")
            left = Logic(keyword, left, right, op.pos)
        return left

    def parse_not(self) -> Node:
        if self.is_kw("NOT"):
            op = self.advance()
            self.nest(op.pos)
            operand = self.condition(self.parse_not(), " after 'NOT'")
            self.depth -= 1
            return Not(operand, op.pos)
        return self.parse_comparison()

    def parse_comparison(self) -> Node:
        first = self.tok
        left = self.parse_additive()
        node = self.parse_predicate(left)
        if node is not left and _quoted_string(first, left) and _constant(node):
            raise _header_in_double_quotes(first)
        if node is not left and (
            self.is_op(*_COMPARE_OPS) or self.is_kw("IS", *_PREDICATE_KEYWORDS)
        ):
            raise CompileError(
                self.tok.pos,
                f"comparisons cannot be chained: expected AND, OR or ')' but found "
                f"{self.tok.describe()} (use parentheses)",
            )
        return node

    def parse_predicate(self, left: Node) -> Node:
        tok = self.tok
        if tok.kind is Kind.OP and tok.text in _COMPARE_OPS:
            self.advance()
            op = "<>" if tok.text == "!=" else tok.text
            if self.is_kw("NULL"):
                raise CompileError(
                    self.tok.pos,
                    f"cannot compare with NULL using '{tok.text}': use IS NULL or IS NOT NULL",
                )
            right = self.parse_additive()
            return self.make_compare(op, left, right, tok)
        if tok.kind is not Kind.KEYWORD:
            return left
        if tok.text == "IS":
            self.advance()
            negated = False
            if self.is_kw("NOT"):
                self.advance()
                negated = True
            if not self.is_kw("NULL"):
                raise self.fail("NULL")
            self.advance()
            return IsNull(left, negated, left.pos)
        negated = False
        if tok.text == "NOT":
            nxt = self.tokens[self.i + 1]
            if not (nxt.kind is Kind.KEYWORD and nxt.text in _PREDICATE_KEYWORDS):
                raise CompileError(
                    nxt.pos,
                    "expected BETWEEN, IN, LIKE, CONTAINS, STARTSWITH or ENDSWITH after 'NOT' "
                    f"but found {nxt.describe()}",
                )
            self.advance()
            negated = True
        if not self.is_kw(*_PREDICATE_KEYWORDS):
            return left
        word = self.advance().text
        if word == "BETWEEN":
            return self.parse_between(left, negated)
        if word == "IN":
            return self.parse_in(left, negated)
        if word == "LIKE":
            return self.parse_like(left, negated)
        if self.tok.kind is not Kind.STRING:
            raise self.fail("a string literal")
        needle = self.advance()
        assert isinstance(needle.value, str)
        return StrPredicate(word, left, needle.value, negated, left.pos)

    def make_compare(self, op: str, left: Node, right: Node, tok: Token) -> Node:
        if (
            isinstance(left, Ref)
            and left.scope == "tags"
            and isinstance(right, Ref)
            and (right.scope == "tags")
        ):
            raise CompileError(right.pos, "TAGS cannot be compared with TAGS")
        if isinstance(right, Ref) and right.scope == "tags":
            left, right, op = right, left, _FLIP[op]  # TAGS always on the left
        self.scalar(right, f"an operand of '{tok.text}'")
        if op not in ("=", "<>"):
            for side in (left, right):
                if isinstance(side, Literal) and isinstance(side.value, bool):
                    raise CompileError(
                        side.pos, f"cannot order TRUE or FALSE with '{tok.text}': use = or <>"
                    )
        return Compare(op, left, right, tok.pos)

    def parse_between(self, value: Node, negated: bool) -> Node:
        low = self.scalar(self.parse_additive(), "a BETWEEN bound")
        if not self.is_kw("AND"):
            raise self.fail("AND between the bounds of BETWEEN")
        self.advance()
        high = self.scalar(self.parse_additive(), "a BETWEEN bound")
        for bound in (low, high):
            if isinstance(bound, Literal) and isinstance(bound.value, bool):
                raise CompileError(bound.pos, "BETWEEN bounds must be numbers or strings")
        if isinstance(low, Literal) and isinstance(high, Literal) and _reversed(low, high):
            raise CompileError(
                low.pos,
                f"BETWEEN bounds are reversed: the lower bound {low.value!r} is greater than "
                f"the upper bound {high.value!r}",
                "invalid expression",
            )
        return Between(value, low, high, negated, value.pos)

    def parse_in(self, value: Node, negated: bool) -> Node:
        if not self.is_op("("):
            raise self.fail("'(' to open the IN list")
        self.advance()
        items: list[Constant] = []
        while True:
            items.append(self.parse_in_item())
            if self.is_op(","):
                self.advance()
                continue
            if self.is_op(")"):
                self.advance()
                return In(value, tuple(items), negated, value.pos)
            raise self.fail("',' or ')' in the IN list")

    def parse_in_item(self) -> Constant:
        tok = self.tok
        sign = 1
        if self.is_op("-", "+"):
            sign = -1 if tok.text == "-" else 1
            self.advance()
            if self.tok.kind is not Kind.NUMBER:
                raise self.fail("a number")
        if self.tok.kind in (Kind.NUMBER, Kind.STRING):
            val = self.advance().value
            assert isinstance(val, str | int | float)
            return -val if sign < 0 and not isinstance(val, str) else val
        if self.is_kw("TRUE", "FALSE"):
            return self.advance().text == "TRUE"
        if self.is_kw("NULL"):
            raise CompileError(tok.pos, "NULL cannot be in an IN list: use IS NULL")
        raise self.fail("a literal (string, number, TRUE or FALSE) in the IN list")

    def parse_like(self, value: Node, negated: bool) -> Node:
        if self.tok.kind is not Kind.STRING:
            raise self.fail("a string literal pattern")
        pattern_tok = self.advance()
        assert isinstance(pattern_tok.value, str)
        escape: str | None = None
        if self.is_kw("ESCAPE"):
            self.advance()
            if self.tok.kind is not Kind.STRING:
                raise self.fail("a one-character string")
            esc_tok = self.advance()
            assert isinstance(esc_tok.value, str)
            if len(esc_tok.value) != 1:
                raise CompileError(
                    esc_tok.pos,
                    f"the ESCAPE string must be exactly one character, not {esc_tok.text}",
                )
            escape = esc_tok.value
        try:
            like.compile_pattern(pattern_tok.value, escape)
        except like.PatternError as exc:
            raise CompileError(pattern_tok.pos, str(exc)) from None
        return Like(value, pattern_tok.value, escape, negated, value.pos)

    def parse_additive(self) -> Node:
        return self._arith(("+", "-"), self.parse_multiplicative)

    def parse_multiplicative(self) -> Node:
        return self._arith(("*", "/", "%"), self.parse_unary)

    def _arith(self, ops: tuple[str, ...], operand: Callable[[], Node]) -> Node:
        """``operand (op operand)*``, left-associative: one level of arithmetic."""
        left = operand()
        while self.is_op(*ops):
            op = self.advance()
            right = operand()
            left = Arith(
                op.text,
                self.scalar(left, "used in arithmetic"),
                self.scalar(right, "used in arithmetic"),
                left.pos,
            )
        return left

    def parse_unary(self) -> Node:
        if self.is_op("-", "+"):
            op = self.advance()
            self.nest(op.pos)
            operand = self.scalar(self.parse_unary(), "used in arithmetic")
            self.depth -= 1
            if op.text == "+":
                return operand
            value = operand.value if isinstance(operand, Literal) else None
            if isinstance(value, int | float) and not isinstance(value, bool):
                return Literal(-value, op.pos)
            return Negate(operand, op.pos)
        return self.parse_primary()

    def parse_primary(self) -> Node:
        tok = self.tok
        if tok.kind in (Kind.NUMBER, Kind.STRING):
            self.advance()
            assert isinstance(tok.value, str | int | float)
            return Literal(tok.value, tok.pos)
        if tok.kind is Kind.NAME:
            self.advance()
            assert isinstance(tok.value, tuple)
            scope, name = tok.value
            return Ref(scope, name, tok.pos)
        if self.is_kw("TRUE", "FALSE"):
            self.advance()
            return Literal(tok.text == "TRUE", tok.pos)
        if self.is_kw("NULL"):
            raise CompileError(tok.pos, "NULL can only be used in IS NULL or IS NOT NULL")
        if self.is_op("("):
            self.advance()
            self.nest(tok.pos)
            inner = self.parse_or()
            self.depth -= 1
            if not self.is_op(")"):
                raise CompileError(
                    self.tok.pos,
                    f"expected ')'{self.after()} to close the '(' at position {tok.pos} "
                    f"but found {self.tok.describe()}",
                )
            self.advance()
            return inner
        if tok.kind is Kind.END or (tok.kind is Kind.OP and tok.text != "("):
            raise self.fail("a value")
        raise self.fail("a value")


def _quoted_string(first: Token, left: Node) -> bool:
    """The left operand is one double-quoted string (SQL's identifier quotes elsewhere)."""
    return first.kind is Kind.STRING and first.text[:1] == '"' and isinstance(left, Literal)


def _constant(node: Node) -> bool:
    """A condition on a literal alone (its left operand), never on the message."""
    return not isinstance(node, Compare) or isinstance(node.right, Literal)


def _header_in_double_quotes(tok: Token) -> CompileError:
    """A double-quoted string tested against a constant: a header name written as standard
    SQL writes identifiers. Here (as in RabbitMQ's dialect) double quotes make a string,
    so the condition would silently never (or always) hold; say how to name a header."""
    name = str(tok.value)
    hint = f"[{name.replace(']', ']]')}]"
    return CompileError(
        tok.pos,
        f"{_short_text(tok.text)} is a string, not a header name (double quotes make a string "
        f"in this dialect): write the header as {hint}",
    )


def _short_text(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reversed(low: Literal, high: Literal) -> bool:
    lo, hi = low.value, high.value
    if isinstance(lo, str):
        lo = parse_number(lo) if parse_number(lo) is not None else lo  # type: ignore[assignment]
    if isinstance(hi, str):
        hi = parse_number(hi) if parse_number(hi) is not None else hi  # type: ignore[assignment]
    if isinstance(lo, str) != isinstance(hi, str):
        return False  # a string against a number: decided per message, never both true
    return bool(lo > hi)  # type: ignore[operator]
