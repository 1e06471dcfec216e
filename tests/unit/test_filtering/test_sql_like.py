"""LIKE: wildcards, ESCAPE, edge cases, agreement with a reference, and no ReDoS."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sievemq.filtering.sql import compile_filter
from sievemq.filtering.sql.like import compile_pattern

from .sql_eval import ev, truth, view


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("abc", "abc", True), ("abc", "abcd", False), ("", "", True), ("", "a", False),
        ("a%", "abc", True), ("a%", "a", True), ("a%", "ba", False),
        ("%c", "abc", True), ("%c", "cb", False), ("%b%", "abc", True), ("%b%", "ac", False),
        ("%", "", True), ("%%", "anything", True),
        ("_", "a", True), ("_", "", False), ("_", "ab", False), ("a_c", "abc", True),
        ("a_c", "ac", False), ("__%", "ab", True), ("__%", "a", False),
        ("a%b%c", "axxbyyc", True), ("a%b%c", "acb", False), ("a%b_c", "abbxc", True),
        ("%a_b%", "xxaxbyy", True), ("%a_b%", "xxabyy", False),
        ("%ab%ab", "abab", True), ("%ab%ab", "aba", False), ("a%a", "a", False),
        ("%é_", "café!", True),  # characters, not bytes
        ("ord%42", "order-42", True),
    ],
)  # fmt: skip
def test_like(pattern: str, value: str, expected: bool) -> None:
    assert ev(f"a LIKE '{pattern}'", {"a": value}) is expected
    assert ev(f"a NOT LIKE '{pattern}'", {"a": value}) is (not expected)


@pytest.mark.parametrize(
    ("pattern", "escape", "value", "expected"),
    [
        ("100!%", "!", "100%", True), ("100!%", "!", "1000", False),
        ("a!_b", "!", "a_b", True), ("a!_b", "!", "axb", False),
        ("a!!b", "!", "a!b", True), ("%!%%", "!", "50% off", True),
        ("%\\_x", "\\", "a_x", True), ("%\\_x", "\\", "abx", False),
        ("x%%", "%", "x%", True),  # the escape character may itself be a wildcard
        ("x%%", "%", "xy", False),
    ],
)  # fmt: skip
def test_like_escape(pattern: str, escape: str, value: str, expected: bool) -> None:
    assert ev(f"a LIKE '{pattern}' ESCAPE '{escape}'", {"a": value}) is expected


@pytest.mark.parametrize("value", [None, 5, b"abc", True])
def test_like_on_a_missing_or_non_string_value_is_unknown(value: object) -> None:
    headers = {} if value is None else {"a": value}
    assert truth("a LIKE '%'", headers) is None
    assert truth("a NOT LIKE 'x%'", headers) is None


def _reference(pattern: str, escape: str | None) -> re.Pattern[str]:
    """LIKE as a regex: fine for the short inputs hypothesis makes, slow for the ReDoS case."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


@settings(max_examples=400, deadline=None)
@given(
    pattern=st.text(alphabet="ab%_", max_size=8),
    value=st.text(alphabet="abc", max_size=10),
)
def test_like_agrees_with_a_regex_reference(pattern: str, value: str) -> None:
    assert compile_pattern(pattern).match(value) is bool(_reference(pattern, None).fullmatch(value))


@settings(max_examples=200, deadline=None)
@given(
    pattern=st.text(alphabet="a%_!", max_size=8).filter(
        lambda p: re.fullmatch(r"(?:[^!]|![%_!])*", p) is not None
    ),
    value=st.text(alphabet="a%_!", max_size=8),
)
def test_like_with_escape_agrees_with_a_regex_reference(pattern: str, value: str) -> None:
    expected = bool(_reference(pattern, "!").fullmatch(value))
    assert compile_pattern(pattern, "!").match(value) is expected


def test_pathological_pattern_is_linear_not_catastrophic() -> None:
    """RabbitMQ CVE-2026-67240: a backtracking regex takes exponential time on this."""
    f = compile_filter("a LIKE '%a%a%a%a%a%a%a%a%a%b'")
    g = compile_filter("a LIKE '%a%a%a%a%a%a%a%a%a%b%'")
    h = compile_filter("a LIKE '%a_a_a_a_a_a_a_a_a_b%'")
    message = view({"a": "a" * 5000})
    start = time.perf_counter()
    for _ in range(20):
        assert not f.evaluate(message)
        assert not g.evaluate(message)
        assert not h.evaluate(message)
    elapsed = time.perf_counter() - start
    # a backtracking matcher needs about 5000**9 steps here and never returns; a linear one takes
    # milliseconds, so a bound far above that keeps the test meaningful on a loaded machine
    assert elapsed < 10.0, f"60 evaluations took {elapsed:.3f}s"
    assert f.errors == g.errors == h.errors == 0
    assert g.evaluate(view({"a": "a" * 5000 + "b"}))
    assert h.evaluate(view({"a": "a" * 5000 + "aaaaaaaaab"}))
