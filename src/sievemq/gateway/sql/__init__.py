"""The SQL filter dialect of ``x-stream-filter-sql`` (SPEC §7): compile once, evaluate per message.

Stdlib only. ``compile_filter(text)`` parses and checks an expression (raising CompileError,
which the gateway maps to 406) and generates one Python function for it; ``SqlFilter.evaluate``
is the hot path run for every candidate message of a filtered consumer.
"""

from sievemq.gateway.sql.compiler import SqlFilter, compile_filter
from sievemq.gateway.sql.errors import CompileError
from sievemq.gateway.sql.lexer import BASIC_PROPERTIES, MAX_CHARS, MAX_TOKENS
from sievemq.gateway.sql.view import DictMessageView, MessageView

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
