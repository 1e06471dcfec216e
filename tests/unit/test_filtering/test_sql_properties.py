"""Property tests: logic laws hold on random messages, and nothing but CompileError escapes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sievemq.filtering.sql import CompileError, compile_filter

from .sql_eval import view

ATOMS = [
    "a = 1", "a > 2", "b = 'x'", "b LIKE 'x%'", "a IN (1, 3)", "b IS NULL", "a BETWEEN 1 AND 3",
    "b CONTAINS 'y'", "flag", "a + 1 > b", "TAGS = 't1'", "TAGS NOT IN ('t2')", "b <> 'z'",
]  # fmt: skip

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["x", "xy", "y", "z", "1", "2.5", "true", "FALSE", "", "%"]),
    st.decimals(allow_nan=False, allow_infinity=False, places=2),
    st.binary(max_size=3),
)
messages = st.builds(
    lambda a, b, flag, tags: view(
        {k: v for k, v in (("a", a), ("b", b), ("flag", flag)) if v is not None}, tags=tags
    ),
    values,
    values,
    values,
    st.lists(st.sampled_from(["t1", "t2", "t3"]), max_size=3).map(tuple),
)


def truth(expr: str, message: object) -> bool | None:
    f = compile_filter(expr)
    g = compile_filter(f"NOT ({expr})")
    pos, neg = f.evaluate(message), g.evaluate(message)  # type: ignore[arg-type]
    assert not (pos and neg)
    return True if pos else False if neg else None


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ATOMS), st.sampled_from(ATOMS), messages)
def test_de_morgan_and_commutativity(x: str, y: str, message: object) -> None:
    assert truth(f"NOT (({x}) AND ({y}))", message) is truth(f"NOT ({x}) OR NOT ({y})", message)
    assert truth(f"NOT (({x}) OR ({y}))", message) is truth(f"NOT ({x}) AND NOT ({y})", message)
    assert truth(f"({x}) AND ({y})", message) is truth(f"({y}) AND ({x})", message)
    assert truth(f"({x}) OR ({y})", message) is truth(f"({y}) OR ({x})", message)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ATOMS), messages)
def test_excluded_middle_only_fails_on_unknown(x: str, message: object) -> None:
    t = truth(x, message)
    either = compile_filter(f"({x}) OR NOT ({x})")
    assert either.evaluate(message) is (t is not None)  # type: ignore[arg-type]
    if x != "flag":  # a bare header IS NULL tests the value, not its truth
        unknown = compile_filter(f"({x}) IS NULL")
        assert unknown.evaluate(message) is (t is None)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(messages, st.sampled_from([*ATOMS, "a / b > 1", "a % b = 0", "-a < b * 2"]))
def test_evaluate_never_raises_on_any_value_type(message: object, expr: str) -> None:
    f = compile_filter(expr)
    assert f.evaluate(message) in (True, False)  # type: ignore[arg-type]


odd_values = st.one_of(
    values,
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.just(dt.datetime(2024, 1, 1)),
    st.just(Decimal("NaN")),
    st.just(float("nan")),
)


@settings(max_examples=200, deadline=None)
@given(odd_values, st.sampled_from(ATOMS))
def test_exotic_header_values_never_raise(value: object, expr: str) -> None:
    f = compile_filter(expr)
    assert f.evaluate(view({"a": value, "b": value, "flag": value})) in (True, False)


TOKENS = [
    "a", "b", "=", "<>", "!=", "<", ">=", "(", ")", ",", "+", "-", "*", "/", "%", "AND", "OR",
    "NOT", "IN", "IS", "NULL", "LIKE", "ESCAPE", "BETWEEN", "CONTAINS", "TRUE", "'s'", "1",
    "2.5", "TAGS", "p.priority", "[q]", "'%'", "'!'", "==", "#", "'", "[", ".",
]  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=12), messages)
def test_random_token_soup_compiles_or_raises_compile_error(
    tokens: list[str], message: object
) -> None:
    text = " ".join(tokens)
    try:
        f = compile_filter(text)
    except CompileError as err:
        assert 1 <= err.position <= len(text) + 1
        assert f"at position {err.position}:" in str(err)
        return
    assert f.evaluate(message) in (True, False)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
@example(".¹")  # a non-ASCII digit after a dot once escaped the lexer as an AssertionError
def test_arbitrary_text_compiles_or_raises_compile_error(text: str) -> None:
    try:
        compile_filter(text)
    except CompileError as err:
        assert 1 <= err.position <= len(text) + 1
