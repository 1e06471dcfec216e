"""The SQL filter dialect of ``x-stream-filter-sql``: compile once, evaluate per message.

Stdlib only. ``compile_filter(text)`` parses and checks an expression (raising CompileError,
which the gateway maps to 406) and generates one Python function for it; ``SqlFilter.evaluate``
is the hot path run for every candidate message of a filtered consumer. The grammar is in
docs/compatibility.md, "The SQL dialect".

Choices that grammar leaves open, made here (tests in tests/unit/test_filtering/test_sql_*.py):

- NOT binds below comparison, as in SQL (RocketMQ parses ``NOT a = 4`` as ``(NOT a) = 4``).
- Comparisons do not chain (``a = b = c`` is a syntax error; use parentheses).
- A bare header used as a condition is TRUE/FALSE for a boolean or the strings 'true'/'false'
  (any case), UNKNOWN for anything else or when missing.
- ``< <= > >=``: numbers (numeric strings count), or two non-numeric strings by code point;
  booleans and other mismatches are FALSE. ``/`` always divides exactly (``3 / 2 = 1.5``);
  ``%`` takes integers only, its sign follows the dividend; arithmetic on a non-number is NULL.
- Decimal values compare and compute as numbers; datetime values as seconds since the epoch
  (AMQP timestamps), naive ones taken as UTC.
- LIKE on a missing or non-string value is UNKNOWN (RabbitMQ 4.2); an escape character must be
  followed by ``%``, ``_`` or itself.
- ``TAGS``, ``routing_key`` and ``exchange`` are spelled exactly so; any other spelling, or a
  ``[quoted]`` name, is a header. ``a.<name>`` / ``application_properties.<name>`` also name a
  header (RabbitMQ 4.2 spelling). TAGS may stand only where a predicate tests it.
- Strings take ' or " (RabbitMQ 4.2); a double-quoted string tested against a constant is a
  header name written as standard SQL writes identifiers, refused with the bracket form
  (docs/compatibility.md, "Names in an expression").
- Nesting (parentheses, NOT, unary signs) is limited to 64 levels, besides 4096 characters and
  200 tokens.
"""

from sievemq.filtering.sql.compiler import SqlFilter, compile_filter
from sievemq.filtering.sql.errors import CompileError
from sievemq.filtering.sql.lexer import BASIC_PROPERTIES, MAX_CHARS, MAX_TOKENS
from sievemq.filtering.sql.view import DictMessageView, MessageView

__all__ = [
    "BASIC_PROPERTIES",
    "MAX_CHARS",
    "MAX_TOKENS",
    "CompileError",
    "DictMessageView",
    "MessageView",
    "SqlFilter",
    "compile_filter",
]
