"""SQL predicates over stored records: headers read from raw property bytes, errors counted."""

from __future__ import annotations

import pamqp.commands as spec
import pytest
from pamqp.common import FieldTable

from sievemq.filtering.sql import compile_filter
from sievemq.filtering.view import sql_predicate
from sievemq.storage import Record


def _props(headers: FieldTable | None = None, **kw: object) -> bytes:
    """Raw content-header property bytes (flags + list), as a publisher sends them."""
    return spec.Basic.Properties(headers=headers, **kw).marshal()  # type: ignore[arg-type]


def _record(headers: FieldTable | None = None, tags: tuple[str, ...] = (), **kw: object) -> Record:
    return Record(0, 0, tags, "ex", "rk", _props(headers, **kw), b"body")


@pytest.mark.parametrize(
    ("expression", "headers", "expected"),
    [
        ("region = 'emea' AND amount > 100", {"region": "emea", "amount": 150}, True),
        ("region = 'emea' AND amount > 100", {"region": "emea", "amount": 50}, False),
        ("region = 'emea' AND amount > 100", {"region": "emea", "amount": "150"}, True),
        ("region = 'emea'", None, False),
        ("region IS NULL", None, True),
        ("a + b + c = 6", {"a": 1, "b": 2, "c": 3}, True),  # three names: one table decode
        ("a + b + c = 6", {"a": 1, "b": 2}, False),
    ],
)
def test_headers_from_raw_bytes(expression: str, headers: FieldTable, expected: bool) -> None:
    predicate = sql_predicate(compile_filter(expression))
    assert predicate(_record(headers)) is expected


def test_properties_tags_routing_key_exchange() -> None:
    predicate = sql_predicate(
        compile_filter(
            "p.priority > 3 AND properties.type = 'order' AND TAGS = 'b' "
            "AND routing_key = 'rk' AND exchange = 'ex'"
        )
    )
    assert predicate(_record(tags=("a", "b"), priority=5, message_type="order"))
    assert not predicate(_record(tags=("a",), priority=5, message_type="order"))
    assert not predicate(_record(tags=("b",), priority=1, message_type="order"))


def test_the_view_is_reset_between_messages() -> None:
    predicate = sql_predicate(compile_filter("p.priority = 5 AND x + y + z > 0"))
    assert predicate(_record({"x": 1, "y": 1, "z": 1}, priority=5))
    assert not predicate(_record({"x": 1, "y": 1}, priority=5))
    assert not predicate(_record({"x": 1, "y": 1, "z": 1}, priority=4))


def test_evaluation_errors_are_counted_not_raised() -> None:
    sql = compile_filter("amount / zero > 1")
    predicate = sql_predicate(sql)
    assert predicate(_record({"amount": 4, "zero": 0})) is False
    broken = Record(0, 0, (), "", "", b"\x20\x00\x00\x00\x00\x50amount", b"")  # cut table
    assert predicate(broken) is False
    assert sql.errors == 2
