"""Binding matchers for the four AMQP 0-9-1 exchange types.

Hot path: every publish asks one matcher for its destinations. Direct is one dict lookup;
topic walks a trie of binding words (``*`` one word, ``#`` zero or more) with memoised
(node, position) pairs so ``#.#.#`` patterns stay linear, and caches results per routing key
until the bindings change; headers decodes the message headers only when asked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from sievemq.amqp.errors import PreconditionFailed
from sievemq.gateway.model.replies import amqp_type, erlang_value, type_class

DestKind = Literal["queue", "exchange"]
Destination = tuple[DestKind, str]
HeadersFn = Callable[[], dict[str, Any] | None]


def dest_kind(destination_type: str) -> DestKind:
    """A destination type as definitions and the admin API spell it ("queue" or "exchange")."""
    return "queue" if destination_type == "queue" else "exchange"


X_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")
TOPIC_CACHE_SIZE = 4096


def freeze(value: Any) -> Any:
    """A hashable, order-insensitive form of a field table, for binding identity."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, bytearray):
        return bytes(value)
    return (amqp_type(value), value)


@dataclass(frozen=True)
class Binding:
    """A binding from exchange ``source`` to a queue or exchange ``destination``."""

    source: str
    destination_kind: DestKind
    destination: str
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    args_key: Any = field(default=(), repr=False)

    @classmethod
    def make(
        cls,
        source: str,
        kind: DestKind,
        destination: str,
        routing_key: str,
        arguments: dict[str, Any] | None,
    ) -> Binding:
        args = dict(arguments or {})
        return cls(source, kind, destination, routing_key, args, freeze(args))

    @property
    def dest(self) -> Destination:
        return (self.destination_kind, self.destination)


class Matcher(Protocol):
    def add(self, binding: Binding) -> None: ...
    def remove(self, binding: Binding) -> None: ...
    def match(self, routing_key: str, headers_fn: HeadersFn) -> Iterable[Destination]: ...


class DirectMatcher:
    """Routing key equal to the binding key."""

    def __init__(self) -> None:
        self._keys: dict[str, Counter[Destination]] = {}

    def add(self, binding: Binding) -> None:
        self._keys.setdefault(binding.routing_key, Counter())[binding.dest] += 1

    def remove(self, binding: Binding) -> None:
        dests = self._keys.get(binding.routing_key)
        if dests is None:
            return
        dests[binding.dest] -= 1
        if dests[binding.dest] <= 0:
            del dests[binding.dest]
        if not dests:
            del self._keys[binding.routing_key]

    def match(self, routing_key: str, headers_fn: HeadersFn) -> Iterable[Destination]:
        dests = self._keys.get(routing_key)
        return dests.keys() if dests else ()


class FanoutMatcher:
    """Every bound destination, whatever the key."""

    def __init__(self) -> None:
        self._dests: Counter[Destination] = Counter()

    def add(self, binding: Binding) -> None:
        self._dests[binding.dest] += 1

    def remove(self, binding: Binding) -> None:
        self._dests[binding.dest] -= 1
        if self._dests[binding.dest] <= 0:
            del self._dests[binding.dest]

    def match(self, routing_key: str, headers_fn: HeadersFn) -> Iterable[Destination]:
        return self._dests.keys()


def split_topic(key: str) -> list[str]:
    """Words of a topic key as RabbitMQ splits them: ``""`` has none, ``"a."`` is a, ""."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "dests")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.dests: Counter[Destination] = Counter()


class TopicMatcher:
    """A trie of binding words; ``*`` matches one word, ``#`` zero or more."""

    def __init__(self) -> None:
        self._root = _Node()
        self._cache: dict[str, frozenset[Destination]] = {}

    def add(self, binding: Binding) -> None:
        node = self._root
        for word in split_topic(binding.routing_key):
            node = node.children.setdefault(word, _Node())
        node.dests[binding.dest] += 1
        self._cache.clear()

    def remove(self, binding: Binding) -> None:
        path = [self._root]
        words = split_topic(binding.routing_key)
        for word in words:
            child = path[-1].children.get(word)
            if child is None:
                return
            path.append(child)
        leaf = path[-1]
        leaf.dests[binding.dest] -= 1
        if leaf.dests[binding.dest] <= 0:
            del leaf.dests[binding.dest]
        for depth in range(len(words), 0, -1):  # prune empty branches
            node = path[depth]
            if node.dests or node.children:
                break
            del path[depth - 1].children[words[depth - 1]]
        self._cache.clear()

    def match(self, routing_key: str, headers_fn: HeadersFn) -> Iterable[Destination]:
        cached = self._cache.get(routing_key)
        if cached is not None:
            return cached
        words = split_topic(routing_key)
        out: set[Destination] = set()
        seen: set[tuple[int, int]] = set()
        n = len(words)
        stack: list[tuple[_Node, int]] = [(self._root, 0)]
        while stack:
            node, i = stack.pop()
            mark = (id(node), i)
            if mark in seen:
                continue
            seen.add(mark)
            hash_child = node.children.get("#")
            if hash_child is not None:
                stack.extend((hash_child, j) for j in range(i, n + 1))
            if i == n:
                out.update(node.dests)
                continue
            child = node.children.get(words[i])
            if child is not None:
                stack.append((child, i + 1))
            star = node.children.get("*")
            if star is not None and star is not child:
                stack.append((star, i + 1))
        result = frozenset(out)
        if len(self._cache) >= TOPIC_CACHE_SIZE:
            self._cache.clear()
        self._cache[routing_key] = result
        return result


def validate_headers_binding(arguments: dict[str, Any]) -> None:
    """RabbitMQ's check of ``x-match`` on a headers binding (406)."""
    if "x-match" not in arguments:
        return
    value = arguments["x-match"]
    if isinstance(value, str):
        if value in X_MATCH_MODES:
            return
        raise PreconditionFailed(
            f"Invalid x-match field value {erlang_value(value)}; "
            "expected all, any, all-with-x, or any-with-x"
        )
    raise PreconditionFailed(
        f"Invalid x-match field type {amqp_type(value)} (value {erlang_value(value)}); "
        "expected longstr"
    )


def _same_value(a: Any, b: Any) -> bool:
    return type_class(a) == type_class(b) and bool(a == b)


class HeadersMatcher:
    """``x-match`` all (default) or any over the binding's arguments; ``-with-x`` also
    compares ``x-`` keys. A void (None) binding value matches on presence only."""

    def __init__(self) -> None:
        self._bindings: Counter[Binding] = Counter()
        self._compiled: dict[Binding, tuple[bool, tuple[tuple[str, Any], ...]]] = {}

    def add(self, binding: Binding) -> None:
        self._bindings[binding] += 1
        mode = binding.arguments.get("x-match", "all")
        with_x = mode.endswith("-with-x")
        items = tuple(
            (k, v)
            for k, v in binding.arguments.items()
            if k != "x-match" and (with_x or not k.startswith("x-"))
        )
        self._compiled[binding] = (mode.startswith("all"), items)

    def remove(self, binding: Binding) -> None:
        self._bindings[binding] -= 1
        if self._bindings[binding] <= 0:
            del self._bindings[binding]
            self._compiled.pop(binding, None)

    def match(self, routing_key: str, headers_fn: HeadersFn) -> Iterable[Destination]:
        if not self._compiled:
            return ()
        headers = headers_fn() or {}
        out: set[Destination] = set()
        for binding, (match_all, items) in self._compiled.items():
            if binding.dest in out:
                continue
            if match_all:
                ok = all(
                    k in headers and (v is None or _same_value(v, headers[k])) for k, v in items
                )
            else:
                ok = any(
                    k in headers and (v is None or _same_value(v, headers[k])) for k, v in items
                )
            if ok:
                out.add(binding.dest)
        return out


MATCHERS: dict[str, Callable[[], Matcher]] = {
    "direct": DirectMatcher,
    "fanout": FanoutMatcher,
    "topic": TopicMatcher,
    "headers": HeadersMatcher,
}
