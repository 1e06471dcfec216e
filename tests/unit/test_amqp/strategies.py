"""Hypothesis strategies for AMQP values: names, field tables, Basic properties."""

from __future__ import annotations

import datetime
import string

from hypothesis import strategies as st
from pamqp import commands


def _cut(text: str, limit: int) -> str:
    """Cut a string to at most ``limit`` UTF-8 bytes without splitting a character."""
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


# any valid UTF-8 text up to 255 bytes, biased to reach the limit with multi-byte characters
shortstr = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=40),
    st.text(st.characters(codec="utf-8"), min_size=60, max_size=255).map(lambda s: _cut(s, 255)),
    st.text(string.ascii_letters, min_size=255, max_size=255),
)
nonempty_shortstr = shortstr.filter(bool)
# names pamqp's validation accepts when it marshals (Deliver, Return, Publish)
exchange_name = st.from_regex(r"[a-zA-Z0-9\-_.:@#,/+ ]{0,127}", fullmatch=True)
delivery_tag = st.integers(0, 2**64 - 1)  # the spec's unsigned longlong
# pamqp packs longlong as signed ('>q'): golden comparisons stop at 2**63 - 1
pamqp_tag = st.integers(0, 2**63 - 1) | st.just(2**63 - 1)
channel_id = st.integers(0, 65535)
field_key = st.text(st.characters(codec="utf-8"), max_size=30).map(lambda s: _cut(s, 128))

_scalar = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.text(st.characters(codec="utf-8"), max_size=50),
    st.floats(width=32, allow_nan=False),
    st.datetimes(
        min_value=datetime.datetime(1970, 1, 2),
        max_value=datetime.datetime(2100, 1, 1),
        timezones=st.just(datetime.UTC),
    ).map(lambda d: d.replace(microsecond=0)),
    st.binary(max_size=20).map(bytearray),
    st.none(),
)
field_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(field_key, inner, max_size=4)
    ),
    max_leaves=12,
)
field_table = st.dictionaries(field_key, field_value, max_size=6)

_timestamp = st.datetimes(
    min_value=datetime.datetime(1970, 1, 2),
    max_value=datetime.datetime(2100, 1, 1),
    timezones=st.just(datetime.UTC),
).map(lambda d: d.replace(microsecond=0))


@st.composite
def properties(draw: st.DrawFn, headers: st.SearchStrategy[object] | None = None) -> object:
    """A random Basic.Properties: every property independently present or absent."""

    def maybe(strategy: st.SearchStrategy[object]) -> object:
        return draw(st.none() | strategy)

    return commands.Basic.Properties(
        content_type=maybe(nonempty_shortstr),
        content_encoding=maybe(nonempty_shortstr),
        headers=draw(headers) if headers is not None else maybe(field_table.filter(bool)),
        delivery_mode=maybe(st.sampled_from([1, 2])),
        priority=maybe(st.integers(0, 255)),
        correlation_id=maybe(nonempty_shortstr),
        reply_to=maybe(nonempty_shortstr),
        expiration=maybe(nonempty_shortstr),
        message_id=maybe(nonempty_shortstr),
        timestamp=maybe(_timestamp),
        message_type=maybe(nonempty_shortstr),
        user_id=maybe(nonempty_shortstr),
        app_id=maybe(nonempty_shortstr),
    )
