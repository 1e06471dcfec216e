"""Grammar of x-stream-filter-sql: tokens, literals, names, precedence, compile errors, limits."""

from __future__ import annotations

import pytest

from sievemq.filtering.sql import MAX_CHARS, CompileError, compile_filter

from .sql_eval import ev, truth


def error(expr: str) -> CompileError:
    with pytest.raises(CompileError) as info:
        compile_filter(expr)
    return info.value


# -- precedence -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # OR < AND: TRUE OR (FALSE AND FALSE)
        ("TRUE OR FALSE AND FALSE", True),
        ("(TRUE OR FALSE) AND FALSE", False),
        # AND < NOT: (NOT FALSE) AND TRUE
        ("NOT FALSE AND TRUE", True),
        ("NOT (FALSE AND TRUE) AND FALSE", False),
        # NOT < comparison: NOT (a = 4), unlike RocketMQ's (NOT a) = 4
        ("NOT a = 4", True),
        # comparison < additive: (a + 1) = 4
        ("a + 1 = 4", True),
        # additive < multiplicative: 2 + (a * 2) = 8
        ("2 + a * 2 = 8", True),
        ("(2 + a) * 2 = 10", True),
        ("2 + a * 2 = 10", False),
        # multiplicative < unary: (-a) * 2 = -6
        ("-a * 2 = -6", True),
        ("- - a = 3", True),
        ("10 - a - 2 = 5", True),  # left associative
        ("12 / a / 2 = 2", True),
        ("a % 2 * 3 = 3", True),
    ],
)
def test_precedence(expr: str, expected: bool) -> None:
    assert ev(expr, {"a": 3}) is expected


def test_keywords_are_case_insensitive() -> None:
    assert ev("a between 1 and 5 and b in ('x') and c is not null and not d like 'q%'", {
        "a": 3, "b": "x", "c": 1, "d": "z"})  # fmt: skip
    assert ev("a Contains 'ell' oR FaLsE", {"a": "hello"})


def test_keywords_cannot_be_bare_names_but_quoted_names_work() -> None:
    assert error("and = 1").position == 1
    assert ev("[and] = 1", {"and": 1})
    assert ev("[order-id] = 'x' AND [a b] = 2 AND [x]]y] = 3", {
        "order-id": "x", "a b": 2, "x]y": 3})  # fmt: skip


# -- literals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("v = 42", 42),
        ("v = 42L", 42),
        ("v = 1.5", 1.5),
        ("v = .5", 0.5),
        ("v = 2.", 2.0),
        ("v = 1e3", 1000),
        ("v = 1.5E-2", 0.015),
        ("v = -7", -7),
        ("v = 'it''s'", "it's"),
        ('v = "say ""hi"""', 'say "hi"'),
        ("v = 'back\\slash'", "back\\slash"),
        ("v = ''", ""),
        ("v = TRUE", True),
        ("v = false", False),
    ],
)
def test_literals(expr: str, value: object) -> None:
    assert ev(expr, {"v": value})
    assert not ev(expr, {"v": "something else"})


def test_comments_and_whitespace() -> None:
    assert ev("a = 1 -- trailing comment", {"a": 1})
    assert ev("a /* inline */ = \t\r\n 1 -- c\n AND b = 2", {"a": 1, "b": 2})


# -- names ------------------------------------------------------------------------------


def test_header_property_and_builtin_references() -> None:
    f = compile_filter(
        "region = 'emea' AND [x-y] > 1 AND p.priority > 3 AND properties.content_type = 'a/b' "
        "AND routing_key = 'rk' AND exchange = 'ex' AND TAGS = 't' AND a.other = 1"
    )
    assert f.header_names == frozenset({"region", "x-y", "other"})
    assert f.property_names == frozenset({"priority", "content_type"})
    assert f.uses_tags and f.uses_routing_key and f.uses_exchange
    assert f.text.startswith("region = 'emea'")


def test_metadata_is_false_when_unused() -> None:
    f = compile_filter("a = 1")
    assert f.header_names == {"a"} and f.property_names == frozenset()
    assert not (f.uses_tags or f.uses_routing_key or f.uses_exchange)


def test_names_are_case_sensitive_and_builtins_are_exact() -> None:
    assert ev("Region = 'x'", {"Region": "x"})
    assert not ev("Region = 'x'", {"region": "x"})
    # a header literally called "tags" is a header; TAGS is the filter values
    assert ev("tags = 'h'", {"tags": "h"}, tags=("t",))
    assert ev("[TAGS] = 'h'", {"TAGS": "h"}, tags=("t",))


def test_every_basic_property_is_reachable() -> None:
    props = {
        "content_type": "text/plain", "content_encoding": "gzip", "delivery_mode": 2,
        "priority": 5, "correlation_id": "c1", "reply_to": "r", "expiration": "6000",
        "message_id": "m1", "timestamp": 1700000000, "type": "order", "user_id": "guest",
        "app_id": "shop",
    }  # fmt: skip
    for name, value in props.items():
        lit = f"'{value}'" if isinstance(value, str) else str(value)
        assert ev(f"p.{name} = {lit}", properties=props), name
        assert ev(f"properties.{name} = {lit}", properties=props), name
        assert not ev(f"p.{name} = {lit}", properties={}), name


# -- compile errors, with their positions ----------------------------------------------


@pytest.mark.parametrize(
    ("expr", "position", "fragment"),
    [
        ("a = 1 AND b =", 14, "expected a value after '=' but found end of expression"),
        ("", 1, "empty expression"),
        ("   -- only a comment", 1, "empty expression"),
        ("a == 1", 3, "'==' is not an operator"),
        ("a = NULL", 5, "use IS NULL"),
        ("a <> null", 6, "use IS NULL"),
        ("NULL = a", 1, "IS NULL"),
        ("a IN ('x', NULL)", 12, "NULL cannot be in an IN list"),
        ("x BETWEEN 10 AND 2", 11, "BETWEEN bounds are reversed"),
        ("x NOT BETWEEN 5.5 AND -1", 15, "BETWEEN bounds are reversed"),
        ("x BETWEEN '10' AND '9'", 11, "reversed"),  # numeric strings compare as numbers
        ("x BETWEEN 'b' AND 'a'", 11, "reversed"),
        ("a CONTAINS b", 12, "expected a string literal after 'CONTAINS' but found name b"),
        ("a STARTSWITH 1", 14, "expected a string literal"),
        ("a NOT ENDSWITH TRUE", 16, "expected a string literal"),
        ("a LIKE b", 8, "expected a string literal pattern"),
        ("a LIKE 'x' ESCAPE 'ab'", 19, "exactly one character"),
        ("a LIKE 'x!' ESCAPE '!'", 8, "ends with the escape character"),
        ("a LIKE '!a' ESCAPE '!'", 8, "must be followed by %, _ or itself"),
        ("a = 1 garbage", 7, "expected AND, OR or end of expression but found name garbage"),
        ("a = 3 ;", 7, "invalid character ';'"),
        ("a = 1 = 2", 7, "comparisons cannot be chained"),
        ("a = 'x", 5, "unterminated string"),
        ('a = "x', 5, "unterminated string"),
        ("[abc = 1", 1, "unterminated quoted name"),
        ("[] = 1", 1, "empty quoted name"),
        ("a /* x", 3, "unterminated comment"),
        ("a # 1", 3, "invalid character '#'"),
        ("région = 1", 2, "invalid character 'é'"),
        ("a = 12abc", 7, "invalid number"),
        ("a = 1.5L", 8, "L suffix"),
        ("a = 1e999", 5, "out of range"),
        ("(a = 1", 7, "expected ')' after number 1 to close the '(' at position 1"),
        ("a = 1)", 6, "expected AND, OR or end of expression but found ')'"),
        ("a IN 'x'", 6, "expected '(' to open the IN list"),
        ("a IN ()", 7, "expected a literal"),
        ("a IN ('x' 'y')", 11, "expected ',' or ')'"),
        ("a IN (b)", 7, "expected a literal"),
        ("a BETWEEN 1 OR 2", 13, "expected AND between the bounds"),
        ("a IS 1", 6, "expected NULL"),
        ("a NOT x", 7, "expected BETWEEN, IN, LIKE"),
        ("5", 1, "expected a condition but found number 5"),
        ("'x' AND a", 1, "expected a condition before 'AND' but found string 'x'"),
        ("a = 1 OR b + 1", 10, "expected a condition after 'OR'"),
        ("TAGS", 1, "expected a condition but found TAGS"),
        ("TAGS + 1 = 2", 1, "TAGS cannot be used in arithmetic"),
        ("TAGS = TAGS", 8, "TAGS cannot be compared with TAGS"),
        ("a > TRUE", 5, "cannot order TRUE or FALSE"),
        ("a BETWEEN FALSE AND TRUE", 11, "must be numbers or strings"),
        ("p.nope = 1", 3, "unknown basic property 'nope'"),
        ("x.y = 1", 2, "unexpected '.'"),
        ("p. = 1", 3, "expected a name after 'p.'"),
        ("a = ", 5, "expected a value after '='"),
        ("a AND", 6, "expected a value after 'AND'"),
        # a header name written in SQL's identifier quotes: a string here, tested against a
        # constant, so the error says how to name a header
        ("\"x-stream-filter-value\" = 'apac'", 1, "write the header as [x-stream-filter-value]"),
        ("a = 1 AND \"region\" IN ('x')", 11, "is a string, not a header name"),
        ('"h" IS NOT NULL', 1, "write the header as [h]"),
        ("\"h\" LIKE 'a%'", 1, "write the header as [h]"),
        ('"a]b" <> 2', 1, "write the header as [a]]b]"),
    ],
)
def test_compile_errors_name_position_and_expectation(
    expr: str, position: int, fragment: str
) -> None:
    err = error(expr)
    assert err.position == position, str(err)
    assert fragment in str(err), str(err)
    assert str(err).startswith(f"{err.kind} at position {position}: ")
    assert err.reply_code == 406


def test_reversed_bounds_are_only_checked_for_constants() -> None:
    assert ev("x BETWEEN lo AND hi", {"x": 3, "lo": 1, "hi": 5})
    assert ev("x BETWEEN '9' AND '10'", {"x": 9.5})
    assert ev("x BETWEEN 2 AND 2", {"x": 2})
    assert ev("x BETWEEN -5 AND -1", {"x": -3})


# -- limits -----------------------------------------------------------------------------


def test_character_limit() -> None:
    padded = "a = 1" + " " * (MAX_CHARS - 5)
    assert len(padded) == MAX_CHARS
    assert ev(padded, {"a": 1})
    err = error(padded + " ")
    assert err.position == MAX_CHARS + 1 and "4096 characters" in str(err)


def test_token_limit() -> None:
    # "a = 1" is 3 tokens, each " OR a = 1" adds 4: NOT + 3 + 4 * 49 = 200 tokens
    ok = "NOT a = 1" + " OR a = 1" * 49
    assert ev(ok, {"a": 1})
    err = error(ok + " OR TRUE")
    assert err.position == len(ok) + 2 and err.kind == "limit exceeded"  # at "OR", token 201


def test_too_many_tokens_is_rejected_at_the_201st() -> None:
    expr = "a = 1" + " OR a = 1" * 50  # 203 tokens
    err = error(expr)
    assert "more than 200 tokens" in str(err)
    # the 201st token starts at the position reported
    assert expr[err.position - 1 :].startswith(("OR", "a", "=", "1"))


def test_deep_nesting_is_limited_not_a_crash() -> None:
    assert ev("(" * 60 + "a = 1" + ")" * 60, {"a": 1})
    err = error("(" * 70 + "a = 1" + ")" * 70)
    assert "nested more than" in str(err)
    assert ev("NOT " * 60 + "a = 1", {"a": 1})  # even number of NOTs


def test_deeply_nested_conditions_compile() -> None:
    nested = "a = 1"
    for _ in range(45):  # 4 tokens a level: stays under the 200-token limit
        nested = f"TRUE = ({nested})"
    assert ev(nested, {"a": 1})
    assert not ev(nested, {"a": 2})
    mixed = "a" + "".join(f" {op} (a" for op in "+-*" * 13) + ")" * 39 + " IS NOT NULL"
    assert ev(mixed, {"a": 3})


def test_long_chains_compile_and_evaluate() -> None:
    expr = " AND ".join(f"h{i} = {i}" for i in range(40))
    headers = {f"h{i}": i for i in range(40)}
    assert ev(expr, headers)
    headers["h39"] = 0
    assert not ev(expr, headers)
    arith = "a" + " + 1" * 90 + " = 91"
    assert ev(arith, {"a": 1})
    assert truth(arith, {}) is None


def test_double_quoted_strings_stay_strings_beside_a_name() -> None:
    """RabbitMQ's dialect quotes strings with ' or "; only a test of a double-quoted string
    against a constant (a header name meant as an SQL identifier) is refused."""
    assert ev('region = "emea"', {"region": "emea"})
    assert ev('"emea" = region', {"region": "emea"})
    assert ev("[x-stream-filter-value] = 'apac'", {"x-stream-filter-value": "apac"})
    assert ev("'apac' = 'apac'", {})  # single quotes: a constant, as written
