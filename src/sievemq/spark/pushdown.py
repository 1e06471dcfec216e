"""Pushed-down WHERE filters -> row bounds and filter values (pure; no session needed).

Spark (4.1+, with ``spark.sql.python.filterPushdown.enabled``) offers the reader the
conjuncts of a WHERE clause. What we use:

- ``offset`` =, >, >=, <, <= : exact offset bounds (ranges are trimmed), not returned;
  ``offset IN (...)`` narrows to [min, max] and is returned for Spark to finish.
- ``timestamp`` =, >, >=, <, <= : exact, since a record's timestamp is its chunk's and chunks
  outside the bounds are never read; not returned. ``IN`` narrows and is returned.
- ``filter_value`` = / IN: the values feed the chunk Bloom check (and the exact any-match per
  message), but the filter is returned: ``filter_value`` is the first value only, so Spark
  must still check each row.

Everything else is returned untouched (Spark evaluates it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from sievemq.spark.planning import Bounds

_RANGE = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


@dataclass
class Pushed:
    bounds: Bounds = field(default_factory=Bounds)
    filter_values: tuple[str, ...] | None = None  # None: no filter_value predicate pushed
    used: list[str] = field(default_factory=list)  # a description of each filter used


def _micros(value: object) -> int | None:
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


def _number(column: str, value: object) -> int | None:
    if column == "timestamp":
        return _micros(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _narrow(b: Bounds, column: str, f: Filter, v: int) -> None:
    lo, hi = (b.lo, b.hi) if column == "offset" else (b.ts_lo, b.ts_hi)
    if isinstance(f, EqualTo):
        lo, hi = max(lo, v), min(hi, v + 1)
    elif isinstance(f, GreaterThan):
        lo = max(lo, v + 1)
    elif isinstance(f, GreaterThanOrEqual):
        lo = max(lo, v)
    elif isinstance(f, LessThan):
        hi = min(hi, v)
    else:
        hi = min(hi, v + 1)
    if column == "offset":
        b.lo, b.hi = lo, hi
    else:
        b.ts_lo, b.ts_hi = lo, hi


def push(filters: Iterable[Filter], pushed: Pushed) -> Iterator[Filter]:
    """Record what can be used in ``pushed``; yield the filters Spark must still evaluate."""
    for f in filters:
        attribute: tuple[str, ...] = getattr(f, "attribute", ())
        column = attribute[0] if len(attribute) == 1 else None
        if column in ("offset", "timestamp") and isinstance(f, _RANGE):
            v = _number(column, f.value)
            if v is not None:
                _narrow(pushed.bounds, column, f, v)
                pushed.used.append(f"{column} {type(f).__name__}")
                continue
        elif column in ("offset", "timestamp") and isinstance(f, In):
            numbers = [_number(column, x) for x in f.value]
            if numbers and all(n is not None for n in numbers):
                lo = min(n for n in numbers if n is not None)
                hi = max(n for n in numbers if n is not None)
                _narrow(pushed.bounds, column, GreaterThanOrEqual(f.attribute, lo), lo)
                _narrow(pushed.bounds, column, LessThanOrEqual(f.attribute, hi), hi)
                pushed.used.append(f"{column} In")
        elif column == "filter_value" and isinstance(f, EqualTo | In):
            values = (f.value,) if isinstance(f, EqualTo) else tuple(f.value)
            strings = tuple(v for v in values if isinstance(v, str) and v)
            if len(strings) == len(values) and strings:
                if pushed.filter_values is None:
                    pushed.filter_values = strings
                else:  # two predicates ANDed: only values in both can match
                    pushed.filter_values = tuple(
                        v for v in pushed.filter_values if v in set(strings)
                    )
                pushed.used.append(f"filter_value {type(f).__name__}")
        yield f
