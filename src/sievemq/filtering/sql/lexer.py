"""Tokenizer for the SQL filter dialect: positions are 1-based character indexes.

Cold path (runs once per subscription). Every regular expression here is a single pass with
no nested quantifiers, so tokenizing is linear in the length of the text.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Final, NamedTuple

from sievemq.filtering.sql.errors import CompileError

MAX_CHARS = 4096
MAX_TOKENS = 200

KEYWORDS = frozenset(
    {
        "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "LIKE", "ESCAPE",
        "CONTAINS", "STARTSWITH", "ENDSWITH",
    }
)  # fmt: skip

# AMQP 0-9-1 basic properties reachable as p.<name> / properties.<name>
BASIC_PROPERTIES = (
    "content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
    "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id",
)  # fmt: skip

PROPERTY_PREFIXES = frozenset({"p", "properties"})
HEADER_PREFIXES = frozenset({"a", "application_properties"})  # RabbitMQ 4.2 spelling


class Kind(Enum):
    NUMBER = "number"
    STRING = "string"
    NAME = "name"  # header, built-in or property reference
    KEYWORD = "keyword"
    OP = "operator"
    END = "end"


class Token(NamedTuple):
    kind: Kind
    text: str  # as written (keywords upper-cased)
    value: object  # int/float for numbers, str for strings, (scope, name) for names
    pos: int  # 1-based

    def describe(self) -> str:
        """How an error message names this token."""
        if self.kind is Kind.END:
            return "end of expression"
        if self.kind is Kind.STRING:
            return f"string {_short(repr(self.value))}"
        if self.kind is Kind.NUMBER:
            return f"number {self.text}"
        if self.kind is Kind.NAME:
            return f"name {_short(self.text)}"
        return f"'{self.text}'"


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_WS = frozenset(" \t\r\n\f")
# ASCII digits only: str.isdigit() also takes "¹", which the number pattern does not match
_DIGITS: Final = frozenset("0123456789")
_NUMBER = re.compile(
    r"(?:[0-9]+(?P<frac>\.[0-9]*)?|(?P<lead>\.[0-9]+))(?P<exp>[eE][+-]?[0-9]+)?(?P<long>[lL])?",
    re.ASCII,
)
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*", re.ASCII)
_IDENT_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$")
_TWO_CHAR_OPS = frozenset({"<>", "!=", ">=", "<="})
_ONE_CHAR_OPS = frozenset("=<>()+-*/%,")


def _char_name(ch: str) -> str:
    return repr(ch) if ch.isprintable() else f"U+{ord(ch):04X}"


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens ending with an END token; raise CompileError on bad input."""
    if len(text) > MAX_CHARS:
        raise CompileError(
            MAX_CHARS + 1,
            f"expression is longer than {MAX_CHARS} characters (limit max_sql_length)",
            "limit exceeded",
        )
    tokens: list[Token] = []
    i, n = 0, len(text)
    while True:
        # whitespace and comments
        while i < n:
            ch = text[i]
            if ch in _WS:
                i += 1
            elif text.startswith("--", i):
                end = text.find("\n", i)
                i = n if end < 0 else end + 1
            elif text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise CompileError(i + 1, "unterminated comment: expected '*/'")
                i = end + 2
            else:
                break
        if i >= n:
            tokens.append(Token(Kind.END, "", None, n + 1))
            return tokens
        if len(tokens) >= MAX_TOKENS:
            raise CompileError(
                i + 1, f"expression has more than {MAX_TOKENS} tokens", "limit exceeded"
            )
        token, i = _next_token(text, i)
        tokens.append(token)


def _next_token(text: str, i: int) -> tuple[Token, int]:
    ch = text[i]
    pos = i + 1
    if ch in "'\"":
        return _string(text, i)
    if ch == "[":
        return _quoted_name(text, i)
    if ch in _DIGITS or (ch == "." and text[i + 1 : i + 2] in _DIGITS):
        return _number(text, i)
    m = _IDENT.match(text, i)
    if m:
        return _name(text, m)
    two = text[i : i + 2]
    if two == "==":
        raise CompileError(pos, "'==' is not an operator: use '=' to compare")
    if two in _TWO_CHAR_OPS:
        return Token(Kind.OP, two, None, pos), i + 2
    if ch in _ONE_CHAR_OPS:
        return Token(Kind.OP, ch, None, pos), i + 1
    raise CompileError(pos, f"invalid character {_char_name(ch)}")


def _string(text: str, i: int) -> tuple[Token, int]:
    quote = text[i]
    parts: list[str] = []
    j = i + 1
    while True:
        end = text.find(quote, j)
        if end < 0:
            raise CompileError(i + 1, f"unterminated string: expected a closing {quote}")
        parts.append(text[j:end])
        if text.startswith(quote, end + 1):  # doubled quote escapes itself
            parts.append(quote)
            j = end + 2
            continue
        value = "".join(parts)
        return Token(Kind.STRING, text[i : end + 1], value, i + 1), end + 1


def _quoted_name(text: str, i: int) -> tuple[Token, int]:
    parts: list[str] = []
    j = i + 1
    while True:
        end = text.find("]", j)
        if end < 0:
            raise CompileError(i + 1, "unterminated quoted name: expected ']'")
        parts.append(text[j:end])
        if text.startswith("]", end + 1):  # ']]' is a literal ']'
            parts.append("]")
            j = end + 2
            continue
        name = "".join(parts)
        if not name:
            raise CompileError(i + 1, "empty quoted name: expected a header name inside [ ]")
        for k, c in enumerate(name):
            if not c.isprintable() and c != " ":
                raise CompileError(i + 2 + k, f"invalid character {_char_name(c)} in a name")
        raw = text[i : end + 1]
        return Token(Kind.NAME, raw, ("header", name), i + 1), end + 1


def _number(text: str, i: int) -> tuple[Token, int]:
    m = _NUMBER.match(text, i)
    assert m is not None  # the caller saw a digit or '.digit'
    end = m.end()
    if end < len(text) and (text[end] in _IDENT_CHARS or text[end] == "."):
        raise CompileError(end + 1, f"invalid number: unexpected {_char_name(text[end])}")
    raw = m.group(0)
    is_float = bool(m.group("frac") or m.group("lead") or m.group("exp"))
    if is_float and m.group("long"):
        raise CompileError(end, "invalid number: the L suffix is only for integers")
    value: int | float
    if is_float:
        value = float(raw)
        if value in (float("inf"), float("-inf")):
            raise CompileError(i + 1, f"number {raw} is out of range")
    else:
        value = int(raw.rstrip("lL"))
    return Token(Kind.NUMBER, raw, value, i + 1), end


def _name(text: str, m: re.Match[str]) -> tuple[Token, int]:
    word = m.group(0)
    pos, end = m.start() + 1, m.end()
    upper = word.upper()
    if upper in KEYWORDS:
        return Token(Kind.KEYWORD, upper, None, pos), end
    if end < len(text) and text[end] == ".":
        if word not in PROPERTY_PREFIXES and word not in HEADER_PREFIXES:
            raise CompileError(
                end + 1, f"unexpected '.' after name {word} (only p. and properties. prefix names)"
            )
        sub = _IDENT.match(text, end + 1)
        if sub is None:
            raise CompileError(end + 2, f"expected a name after '{word}.'")
        name = sub.group(0)
        if word in HEADER_PREFIXES:
            return Token(Kind.NAME, text[m.start() : sub.end()], ("header", name), pos), sub.end()
        if name not in BASIC_PROPERTIES:
            raise CompileError(
                end + 2,
                f"unknown basic property {name!r}: expected one of {', '.join(BASIC_PROPERTIES)}",
            )
        return Token(Kind.NAME, text[m.start() : sub.end()], ("property", name), pos), sub.end()
    if word == "TAGS":
        return Token(Kind.NAME, word, ("tags", word), pos), end
    if word in ("routing_key", "exchange"):
        return Token(Kind.NAME, word, (word, word), pos), end
    return Token(Kind.NAME, word, ("header", word), pos), end
