"""Slow-path helpers the generated evaluators call when a value is not of the expected type.

Hot path: the generated code handles the common, well-typed cases inline and falls back to
these. Three-valued logic: ``None`` is SQL NULL/UNKNOWN. Coercions (docs/compatibility.md): a string
that parses as a number is that number wherever a number is expected, the strings
'true'/'false' (any case) compare with booleans, other mismatched comparisons are FALSE.
"""

from __future__ import annotations

import datetime as _dt
import operator
import re
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

_NUMERIC_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_INT_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_MAX_NUMBER_TEXT = 400  # longer numeric text is not treated as a number (int() cost guard)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)

NUM = (int, float)  # exact types for the inline fast paths (bool is excluded on purpose)

ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
NOT3 = {True: False, False: True, None: None}


def parse_number(text: str) -> int | float | None:
    """The number a string spells (RocketMQ stores every property as a string), else None."""
    if len(text) > _MAX_NUMBER_TEXT or not _NUMERIC_TEXT.fullmatch(text):
        return None
    if _INT_TEXT.fullmatch(text):
        return int(text)
    value = float(text)
    return value if value not in (float("inf"), float("-inf")) else None


def as_number(value: object) -> int | float | None:
    """A value as a number where a number is expected, or None when it is not one."""
    t = type(value)
    if t is int or t is float:
        return value  # type: ignore[return-value]
    if t is str:
        return parse_number(value)  # type: ignore[arg-type]
    if t is Decimal:
        d: Decimal = value  # type: ignore[assignment]
        return int(d) if d == d.to_integral_value() else float(d)
    if isinstance(value, _dt.datetime):  # AMQP timestamps: seconds since the epoch
        when = value if value.tzinfo else value.replace(tzinfo=_dt.UTC)
        secs = (when - _EPOCH).total_seconds()
        return int(secs) if secs == int(secs) else secs
    return None


def _as_bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.lower()
        if low == "true":
            return True
        if low == "false":
            return False
    return None


def _is_numeric_type(value: object) -> bool:
    return type(value) in (int, float, Decimal) or isinstance(value, _dt.datetime)


def eq(left: object, right: object) -> bool:
    """``=`` on two non-NULL values, with the dialect's coercions."""
    tl, tr = type(left), type(right)
    if tl is bool or tr is bool:
        bl, br = _as_bool(left), _as_bool(right)
        return bl is not None and bl is br
    if tl is tr:
        return bool(left == right)
    if _is_numeric_type(left) or _is_numeric_type(right):
        nl, nr = as_number(left), as_number(right)
        return nl is not None and nr is not None and nl == nr
    return False


def order(left: object, right: object, op: str) -> bool:
    """``< <= > >=`` on two non-NULL values: numbers (numeric strings count) or strings."""
    tl, tr = type(left), type(right)
    if tl is bool or tr is bool:
        return False
    nl, nr = as_number(left), as_number(right)
    if nl is not None and nr is not None:
        return ORDER[op](nl, nr)
    if (tl is str and tr is str) or (tl is bytes and tr is bytes):
        return ORDER[op](left, right)
    return False


def eq3(left: object, right: object) -> bool | None:
    if left is None or right is None:
        return None
    return eq(left, right)


def ne3(left: object, right: object) -> bool | None:
    if left is None or right is None:
        return None
    return not eq(left, right)


def order3(left: object, right: object, op: str) -> bool | None:
    if left is None or right is None:
        return None
    return order(left, right, op)


def arith(op: str, left: object, right: object) -> object:
    """``+ - * / %`` when an operand is not an int/float: NULL unless both are numbers."""
    a, b = as_number(left), as_number(right)
    if a is None or b is None:
        return None
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b  # ZeroDivisionError is an evaluation error, counted by the caller
    return remainder(a, b)


def remainder(a: object, b: object) -> int | None:
    """SQL ``%``: integers only, the sign follows the dividend; NULL otherwise."""
    if type(a) is not int or type(b) is not int:
        x, y = as_number(a), as_number(b)
        if type(x) is not int or type(y) is not int:
            return None
        a, b = x, y
    assert isinstance(a, int) and isinstance(b, int)
    r = abs(a) % abs(b)  # ZeroDivisionError when b == 0: counted by the caller
    return r if a >= 0 else -r


def negate(value: object) -> object:
    n = as_number(value)
    return None if n is None else -n


def to_bool(value: object) -> bool | None:
    """A bare value used as a condition: booleans and 'true'/'false'; anything else UNKNOWN."""
    return _as_bool(value)


def in_list(value: object, items: tuple[object, ...]) -> bool:
    """IN on a non-NULL value: equal (with coercions) to any item."""
    return any(eq(value, item) for item in items)


def each_value(
    pred: Callable[[object, object], bool | None],
    m: object,
    values: Iterable[object],
    decisive: bool,
) -> bool | None:
    """TAGS with a predicate over several values: ``decisive`` True for a positive predicate
    (TRUE when any value matches), False for a negated one (TRUE when all pass the NOT form,
    FALSE as soon as one fails); NULL when no value decided and one was NULL, and the
    predicate on NULL when there are no values."""
    result: bool | None = not decisive
    seen = False
    for v in values:
        seen = True
        r = pred(m, v)
        if r is decisive:
            return decisive
        if r is None:
            result = None
    return result if seen else pred(m, None)
