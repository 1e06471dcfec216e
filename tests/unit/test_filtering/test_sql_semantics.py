"""Semantics of x-stream-filter-sql: three-valued logic, coercions, every operator, TAGS."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from sievemq.filtering.sql import DictMessageView, compile_filter

from .sql_eval import ev, truth, view

T, F, U = True, False, None
BOOL_HEADERS = {"t": True, "f": False}  # "u" is missing: UNKNOWN


# -- three-valued logic -----------------------------------------------------------------

AND_TABLE = {
    ("t", "t"): T, ("t", "f"): F, ("t", "u"): U,
    ("f", "t"): F, ("f", "f"): F, ("f", "u"): F,
    ("u", "t"): U, ("u", "f"): F, ("u", "u"): U,
}  # fmt: skip
OR_TABLE = {
    ("t", "t"): T, ("t", "f"): T, ("t", "u"): T,
    ("f", "t"): T, ("f", "f"): F, ("f", "u"): U,
    ("u", "t"): T, ("u", "f"): U, ("u", "u"): U,
}  # fmt: skip


@pytest.mark.parametrize(("pair", "expected"), AND_TABLE.items())
def test_and_truth_table(pair: tuple[str, str], expected: bool | None) -> None:
    assert truth(f"{pair[0]} AND {pair[1]}", BOOL_HEADERS) is expected


@pytest.mark.parametrize(("pair", "expected"), OR_TABLE.items())
def test_or_truth_table(pair: tuple[str, str], expected: bool | None) -> None:
    assert truth(f"{pair[0]} OR {pair[1]}", BOOL_HEADERS) is expected


@pytest.mark.parametrize(("name", "expected"), [("t", F), ("f", T), ("u", U)])
def test_not_truth_table(name: str, expected: bool | None) -> None:
    assert truth(f"NOT {name}", BOOL_HEADERS) is expected


def test_only_true_is_delivered() -> None:
    assert not ev("missing = 1")
    assert not ev("NOT missing = 1")
    assert not ev("missing <> 1")  # <> on a missing header is UNKNOWN, not TRUE
    assert ev("TRUE") and not ev("FALSE")


def test_short_circuit_skips_the_right_side_and_its_errors() -> None:
    f = compile_filter("a = 1 OR 1 / z = 1")
    assert f.evaluate(view({"a": 1, "z": 0}))
    assert f.errors == 0
    g = compile_filter("a = 2 AND 1 / z = 1")
    assert not g.evaluate(view({"a": 1, "z": 0}))
    assert g.errors == 0


def test_bare_header_as_condition() -> None:
    assert ev("flag", {"flag": True})
    assert ev("flag", {"flag": "TRUE"})  # RocketMQ stores everything as strings
    assert truth("flag", {"flag": "false"}) is False
    assert truth("flag", {"flag": "yes"}) is None
    assert truth("flag", {"flag": 1}) is None
    assert truth("flag", {}) is None


# -- comparisons and coercions ----------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "value", "expected"),
    [
        ("a = 5", 5, T), ("a = 5", 5.0, T), ("a = 5", 6, F), ("a = 5", "5", T),
        ("a = 5", "5.0", T), ("a = 5", "five", F), ("a = 5", True, F), ("a = 1", True, F),
        ("a = 5", Decimal("5"), T), ("a = 9.99", Decimal("9.99"), T), ("a = 5", None, U),
        ("a = 5", b"5", F), ("a = 5", [5], F),
        ("a = 'x'", "x", T), ("a = 'x'", "X", F), ("a = '5'", 5, T), ("a = 'x'", 5, F),
        ("a = 'x'", b"x", F), ("a = 'x'", None, U),
        ("a = TRUE", True, T), ("a = TRUE", "true", T), ("a = TRUE", "True", T),
        ("a = TRUE", "false", F), ("a = TRUE", 1, F), ("a = FALSE", False, T),
        ("a = 'true'", True, T),
        ("a <> 5", 5, F), ("a <> 5", 6, T), ("a != 5", "6", T), ("a <> 5", "x", T),
        ("a <> 'x'", "y", T), ("a <> 'x'", "x", F), ("a <> TRUE", False, T),
        ("a <> 5", None, U), ("a <> 'x'", None, U), ("a <> TRUE", "true", F),
        ("a > 5", 6, T), ("a > 5", 5, F), ("a >= 5", 5, T), ("a < 5", 4.5, T),
        ("a <= 5", 5, T), ("a > 5", "10", T), ("a > 5", "4", F), ("a > 5", "x", F),
        ("a > 5", True, F), ("a > 5", None, U), ("a > 99", "99.5", T),
        ("a > 2147483647", "10000000000", T), ("a > 1.5", Decimal("1.6"), T),
        ("a > 'b'", "c", T), ("a > 'b'", "a", F), ("a > '9'", "10", T),  # numeric strings
        ("a > 'b'", 5, F), ("a < 'b'", None, U),
    ],
)  # fmt: skip
def test_comparison(expr: str, value: object, expected: bool | None) -> None:
    headers = {} if value is None else {"a": value}
    assert truth(expr, headers) is expected


def test_constant_on_the_left_is_the_same_comparison() -> None:
    for value in (4, 5, 6, "5", None):
        headers = {} if value is None else {"a": value}
        assert truth("5 < a", headers) is truth("a > 5", headers)
        assert truth("5 = a", headers) is truth("a = 5", headers)
        assert truth("'x' <> a", headers) is truth("a <> 'x'", headers)


def test_comparing_two_headers() -> None:
    assert ev("a = b", {"a": 1, "b": "1"})
    assert ev("a < b", {"a": "2", "b": 10})
    assert ev("a <> b", {"a": "x", "b": "y"})
    assert truth("a = b", {"a": 1}) is None
    assert truth("a > b", {"a": True, "b": 1}) is False


def test_datetime_values_compare_as_epoch_seconds() -> None:
    when = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert ev("p.timestamp = 1704067200", properties={"timestamp": when})
    assert ev("p.timestamp > 1700000000", properties={"timestamp": when.replace(tzinfo=None)})


# -- arithmetic -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "headers", "expected"),
    [
        ("a + 2 = 5", {"a": 3}, T),
        ("a - 2 = 1", {"a": 3}, T),
        ("a * 2 = 6", {"a": 3}, T),
        ("a / 2 = 1.5", {"a": 3}, T),  # / always divides exactly
        ("a % 2 = 1", {"a": 3}, T),
        ("a % 2 = -1", {"a": -3}, T),  # the sign follows the dividend, as in SQL
        ("a % 2 = 1", {"a": 3.5}, U),  # % is for integers
        ("a + 1 = 3", {"a": "2"}, T),  # numeric string used as a number
        ("a + 1 = 3", {"a": "two"}, U),
        ("a + 1 = 3", {"a": True}, U),
        ("a + 1 = 3", {}, U),
        ("-a = -2", {"a": "2"}, T),
        ("-a = 0", {"a": "x"}, U),
        ("a + b = 3.5", {"a": 1, "b": Decimal("2.5")}, T),
        ("a * b > 10", {"a": 4, "b": 3}, T),
        ("a + 0.5 = 1.5", {"a": 1}, T),
    ],
)
def test_arithmetic(expr: str, headers: dict[str, object], expected: bool | None) -> None:
    assert truth(expr, headers) is expected


@pytest.mark.parametrize("expr", ["10 / a = 1", "10 % a = 1", "10 / (a - 1) > 0"])
def test_division_by_zero_is_counted_and_not_delivered(expr: str) -> None:
    f = compile_filter(expr)
    headers = {"a": 0} if "a - 1" not in expr else {"a": 1}
    assert f.evaluate(view(headers)) is False
    assert f.errors == 1
    assert f.evaluate(view(headers)) is False
    assert f.errors == 2
    assert compile_filter(expr).errors == 0  # each SqlFilter counts its own


def test_errors_never_escape_evaluate() -> None:
    class Exploding(DictMessageView):
        def header(self, name: str) -> object | None:
            raise RuntimeError("decode failed")

    f = compile_filter("a = 1")
    assert f.evaluate(Exploding()) is False
    assert f.errors == 1


# -- BETWEEN ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "between", "not_between"),
    [(1, F, T), (2, T, F), (5, T, F), (7, T, F), (8, F, T), ("5", T, F), ("x", F, F),
     (None, U, U), (True, F, F)],
)  # fmt: skip
def test_between(value: object, between: bool | None, not_between: bool | None) -> None:
    headers = {} if value is None else {"a": value}
    assert truth("a BETWEEN 2 AND 7", headers) is between
    assert truth("a NOT BETWEEN 2 AND 7", headers) is not_between


def test_between_with_header_bounds_and_unknown_bound() -> None:
    assert ev("a BETWEEN lo AND hi", {"a": 3, "lo": "1", "hi": 4})
    assert truth("a BETWEEN lo AND 4", {"a": 3}) is None
    assert truth("a BETWEEN lo AND 4", {"a": 9}) is False  # FALSE AND UNKNOWN
    assert truth("a BETWEEN 'b' AND 'd'", {"a": "c"}) is True


# -- IN ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "value", "expected"),
    [
        ("a IN ('x', 'y')", "x", T), ("a IN ('x', 'y')", "z", F), ("a IN ('x', 'y')", None, U),
        ("a NOT IN ('x', 'y')", "z", T), ("a NOT IN ('x', 'y')", "x", F),
        ("a NOT IN ('x', 'y')", None, U),
        ("a IN ('1', '2')", 1, T), ("a IN (1, 2)", "2", T), ("a IN (1, 2)", 2.0, T),
        ("a IN (1, 2)", True, F), ("a IN (-1, 2.5)", -1, T), ("a IN ('x', 3, TRUE)", "true", T),
        ("a IN ('x', 3, TRUE)", 3, T), ("a NOT IN (1, 2)", 3, T), ("a NOT IN (1, 2)", "1", F),
        ("a IN ('only')", "only", T),
    ],
)  # fmt: skip
def test_in(expr: str, value: object, expected: bool | None) -> None:
    headers = {} if value is None else {"a": value}
    assert truth(expr, headers) is expected


# -- CONTAINS / STARTSWITH / ENDSWITH ---------------------------------------------------


@pytest.mark.parametrize(
    ("op", "needle", "value", "positive", "negative"),
    [
        ("CONTAINS", "ell", "hello", T, F), ("CONTAINS", "xyz", "hello", F, T),
        ("STARTSWITH", "he", "hello", T, F), ("STARTSWITH", "lo", "hello", F, T),
        ("ENDSWITH", "lo", "hello", T, F), ("ENDSWITH", "he", "hello", F, T),
        # RocketMQ: FALSE (not UNKNOWN) for a missing or non-string value, in both forms
        ("CONTAINS", "1", None, F, F), ("CONTAINS", "1", 1, F, F),
        ("STARTSWITH", "1", 12, F, F), ("ENDSWITH", "e", True, F, F),
        # ... and for an empty search string
        ("CONTAINS", "", "hello", F, F), ("STARTSWITH", "", "hello", F, F),
        ("ENDSWITH", "", "", F, F),
        ("CONTAINS", "%", "100%", T, F),  # no wildcards here
    ],
)  # fmt: skip
def test_string_predicates(
    op: str, needle: str, value: object, positive: bool, negative: bool
) -> None:
    headers = {} if value is None else {"a": value}
    assert ev(f"a {op} '{needle}'", headers) is positive
    assert ev(f"a NOT {op} '{needle}'", headers) is negative
    # FALSE, not UNKNOWN: NOT of it delivers
    assert ev(f"NOT (a {op} '{needle}')", headers) is (not positive)


# -- IS NULL ----------------------------------------------------------------------------


def test_is_null() -> None:
    assert ev("a IS NULL") and not ev("a IS NULL", {"a": ""})
    assert ev("a IS NOT NULL", {"a": 0}) and not ev("a IS NOT NULL")
    assert ev("a + 1 IS NULL", {"a": "x"})  # UNKNOWN arithmetic is NULL
    assert ev("p.priority IS NULL") and ev("p.priority IS NOT NULL", properties={"priority": 0})


# -- built-ins and TAGS -----------------------------------------------------------------


def test_routing_key_and_exchange() -> None:
    assert ev("routing_key = 'orders.eu'", routing_key="orders.eu")
    assert ev("routing_key LIKE 'orders.%' AND exchange = 'ex'", routing_key="orders.x",
              exchange="ex")  # fmt: skip
    assert ev("exchange = ''", exchange="")  # the default exchange is an empty string


@pytest.mark.parametrize(
    ("expr", "tags", "expected"),
    [
        ("TAGS = 'b'", ("a", "b"), T), ("TAGS = 'c'", ("a", "b"), F), ("TAGS = 'a'", (), U),
        ("'b' = TAGS", ("a", "b"), T),
        ("TAGS <> 'b'", ("a", "b"), F), ("TAGS <> 'c'", ("a", "b"), T), ("TAGS <> 'a'", (), U),
        ("TAGS IN ('TagA', 'TagB')", ("TagB",), T), ("TAGS IN ('TagA', 'TagB')", ("x", "TagA"), T),
        ("TAGS IN ('TagA', 'TagB')", ("x",), F), ("TAGS IN ('TagA')", (), U),
        ("TAGS NOT IN ('TagA', 'TagB')", ("x", "TagA"), F),
        ("TAGS NOT IN ('TagA', 'TagB')", ("x", "y"), T), ("TAGS NOT IN ('a')", (), U),
        ("TAGS IN ('1', 2)", ("2",), T),
        ("TAGS LIKE 'or%'", ("x", "order"), T), ("TAGS NOT LIKE 'or%'", ("x", "order"), F),
        ("TAGS NOT LIKE 'or%'", ("x", "y"), T), ("TAGS LIKE 'o_'", (), U),
        ("TAGS CONTAINS 'rd'", ("x", "order"), T), ("TAGS CONTAINS 'rd'", (), F),
        ("TAGS NOT CONTAINS 'rd'", ("x", "order"), F), ("TAGS NOT CONTAINS 'rd'", (), F),
        ("TAGS NOT CONTAINS 'rd'", ("x",), T),
        ("TAGS STARTSWITH 'or'", ("order",), T), ("TAGS ENDSWITH 'er'", ("x", "order"), T),
        ("TAGS IS NULL", (), T), ("TAGS IS NULL", ("a",), F), ("TAGS IS NOT NULL", ("a",), T),
        ("TAGS IS NOT NULL", (), F),
        ("TAGS > 5", ("1", "9"), T), ("TAGS BETWEEN 2 AND 4", ("1", "3"), T),
        ("TAGS NOT BETWEEN 2 AND 4", ("1", "3"), F), ("TAGS = 3", ("3",), T),
    ],
)  # fmt: skip
def test_tags_with_several_values(expr: str, tags: tuple[str, ...], expected: bool | None) -> None:
    assert truth(expr, tags=tags) is expected


def test_tags_in_is_the_rocketmq_tag_filter() -> None:
    f = compile_filter("TAGS IN ('TagA','TagB') AND amount > 10")
    assert f.uses_tags and f.header_names == {"amount"}
    assert f.evaluate(view({"amount": 11}, tags="TagA"))
    assert not f.evaluate(view({"amount": 11}, tags="TagC"))


def test_generated_code_carries_no_user_text() -> None:
    evil = "x') or __import__('os').system('true') or ('"
    f = compile_filter(f"[{evil.replace(']', ']]')}] = '{evil.replace(chr(39), chr(39) * 2)}'")
    assert "__import__" not in f.python_source and "system" not in f.python_source
    assert f.evaluate(view({evil: evil}))
    assert f.header_names == {evil}
