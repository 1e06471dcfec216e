"""Helpers shared by the SQL filter tests (no tests here): evaluate, read 3-valued results."""

from __future__ import annotations

from sievemq.filtering.sql import DictMessageView, compile_filter


def view(headers: dict[str, object] | None = None, **kw: object) -> DictMessageView:
    return DictMessageView(headers or {}, **kw)  # type: ignore[arg-type]


def ev(expr: str, headers: dict[str, object] | None = None, **kw: object) -> bool:
    """Would a message with these headers be delivered? (and no evaluation error happened)"""
    f = compile_filter(expr)
    result = f.evaluate(view(headers, **kw))
    assert f.errors == 0, f"evaluation error in {expr!r}"
    return result


def truth(expr: str, headers: dict[str, object] | None = None, **kw: object) -> bool | None:
    """The SQL truth value: TRUE, FALSE, or None for UNKNOWN (neither X nor NOT X delivers)."""
    if ev(expr, headers, **kw):
        return True
    if ev(f"NOT ({expr})", headers, **kw):
        return False
    return None
