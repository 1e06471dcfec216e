"""RabbitMQ's policies and operator policies: validation, matching and their effect.

Pure functions and frozen values (no I/O). A policy has a ``pattern`` (an unanchored regular
expression on the queue or exchange name), an ``apply-to`` (``queues``, ``classic_queues``,
``quorum_queues``, ``streams``, ``exchanges``, ``all``), a ``priority`` and a ``definition``.
Of the policies matching an object the highest priority wins (ties: the first name); the same
for operator policies, whose values are then merged in, the stricter (lower) one winning for
the seven keys RabbitMQ merges. Queue arguments against the effective definition: the lower
value for limits and TTLs (``max-length``, ``max-length-bytes``, ``message-ttl``, ``expires``,
``delivery-limit``, ``max-age``, ``stream-max-segment-size-bytes``), the argument for
``overflow`` and the dead-letter keys (rabbit_amqqueue_process, rabbit_quorum_queue and
rabbit_stream_queue of RabbitMQ 3.10). Validation texts were taken from a RabbitMQ 3.10.8
peer; a bad value is a ``PolicyError`` whose ``reason`` is RabbitMQ's 400 reason.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sievemq.gateway.model.classic.arguments import QueueArguments
from sievemq.gateway.model.replies import erlang_value
from sievemq.gateway.model.stream.arguments import (
    MAX_FILTER_SIZE_BYTES,
    MAX_STREAM_MAX_SEGMENT_SIZE,
    MIN_FILTER_SIZE_BYTES,
    StreamArguments,
    duration_ms,
)

APPLY_TO = ("queues", "classic_queues", "quorum_queues", "streams", "exchanges", "all")
# what each apply-to value covers, by object kind (classic, quorum, stream, exchange)
_COVERS = {
    "queues": ("classic", "quorum", "stream"),
    "classic_queues": ("classic",),
    "quorum_queues": ("quorum",),
    "streams": ("stream",),
    "exchanges": ("exchange",),
    "all": ("classic", "quorum", "stream", "exchange"),
}
# keys RabbitMQ merges between a policy and an operator policy: the lower value wins
MERGED_KEYS = (
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "delivery-limit",
)
OPERATOR_KEYS = MERGED_KEYS
OPERATOR_COMPONENT = "operator_policy"  # operator policies are runtime parameters of this
MIN_SEGMENT_BYTES = 4096  # a policy's smaller segment size is raised to this
FILTER_SIZE_KEY = "stream-filter-size-bytes"  # SieveMQ's own: Bloom filter bytes per chunk


class PolicyError(ValueError):
    """A refused policy; ``reason`` is the 400 reason RabbitMQ gives."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def erlang_term(value: Any) -> str:
    """A JSON value as RabbitMQ's ``~p`` prints the term its JSON decoder made of it."""
    if isinstance(value, dict):
        return "[" + ",".join(f'{{<<"{k}">>,{erlang_term(v)}}}' for k, v in value.items()) + "]"
    if isinstance(value, list):
        return "[" + ",".join(erlang_term(v) for v in value) + "]"
    if value is None:
        return "null"
    return erlang_value(value)


def _failed(text: str) -> PolicyError:
    return PolicyError(f"Validation failed\n\n{text}\n")


def _is_int(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _int_check(low: int, what: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if _is_int(value, low) else f"{erlang_term(value)} is not a valid {what}"

    return check


def _one_of(values: tuple[str, ...], what: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in values else f"{erlang_term(value)} is not a valid {what}"

    return check


def _text_check(what: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if isinstance(value, str) else f"{erlang_term(value)} is not a valid {what}"

    return check


def _max_age(value: Any) -> str | None:
    if isinstance(value, str) and duration_ms(value):
        return None
    return f"{erlang_term(value)} is not a valid max age"


def _filter_size(value: Any) -> str | None:
    if _is_int(value, MIN_FILTER_SIZE_BYTES) and value <= MAX_FILTER_SIZE_BYTES:
        return None
    return (
        f"{erlang_term(value)} is not a valid filter size "
        f"({MIN_FILTER_SIZE_BYTES}..{MAX_FILTER_SIZE_BYTES})"
    )


VALIDATORS: dict[str, Callable[[Any], str | None]] = {
    "alternate-exchange": _text_check("alternate exchange name"),
    "dead-letter-exchange": _text_check("dead letter exchange name"),
    "dead-letter-routing-key": _text_check("dead letter routing key"),
    "message-ttl": _int_check(0, "message TTL"),
    "expires": _int_check(1, "queue expiry"),
    "max-length": _int_check(0, "maximum length"),
    "max-length-bytes": _int_check(0, "maximum length in bytes"),
    "max-in-memory-length": _int_check(0, "maximum memory in bytes"),
    "max-in-memory-bytes": _int_check(0, "maximum memory in bytes"),
    "queue-mode": _one_of(("default", "lazy"), "queue-mode value"),
    "queue-version": _one_of((1, 2), "queue version"),  # type: ignore[arg-type]
    "overflow": _one_of(("drop-head", "reject-publish", "reject-publish-dlx"), "overflow value"),
    "delivery-limit": _int_check(0, "delivery limit"),
    "max-age": _max_age,
    "stream-max-segment-size-bytes": _int_check(0, "segment size"),
    "queue-leader-locator": _one_of(
        ("client-local", "random", "least-leaders", "balanced"), "queue leader locator value"
    ),
    "initial-cluster-size": _int_check(0, "cluster size"),
    FILTER_SIZE_KEY: _filter_size,
}


@dataclass(frozen=True)
class Policy:
    """One policy (or operator policy) of a vhost."""

    vhost: str
    name: str
    pattern: str
    apply_to: str = "all"
    priority: int | float = 0
    definition: dict[str, Any] = field(default_factory=dict)

    def applies(self, kind: str, name: str) -> bool:
        """Whether it matches an object of ``kind`` (classic, quorum, stream, exchange)."""
        return kind in _COVERS[self.apply_to] and self.regex.search(name) is not None

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern)

    def to_json(self) -> dict[str, Any]:
        """As ``/api/policies`` shows it."""
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": dict(self.definition),
            "priority": self.priority,
        }

    def value(self) -> dict[str, Any]:
        """As the ``value`` of an ``operator_policy`` runtime parameter."""
        return {
            "pattern": self.pattern,
            "definition": dict(self.definition),
            "priority": self.priority,
            "apply-to": self.apply_to,
        }


def operator_parameter(policy: Policy) -> dict[str, Any]:
    """An operator policy as RabbitMQ's runtime parameter (``/api/parameters``, definitions)."""
    return {
        "value": policy.value(),
        "vhost": policy.vhost,
        "component": OPERATOR_COMPONENT,
        "name": policy.name,
    }


def parse(vhost: str, name: str, body: Any, operator: bool = False) -> Policy:
    """A policy from a PUT body (or a definitions item); PolicyError with RabbitMQ's text,
    checked in its order: the mandatory keys, priority, pattern, apply-to, definition."""
    if not isinstance(body, dict):
        raise PolicyError("[{key_missing,pattern}]")
    for key in ("pattern", "definition"):
        if key not in body:
            raise PolicyError(f"[{{key_missing,{key}}}]")
    priority = body.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int | float):
        raise _failed(f"priority should be a number, actually was {erlang_term(priority)}")
    pattern = body["pattern"]
    if not isinstance(pattern, str):
        raise _failed(f"pattern should be a binary but was {erlang_term(pattern)}")
    try:
        re.compile(pattern)
    except re.error as error:
        raise _failed(
            f'pattern should be regular expression but is invalid: {{"{error.msg}",'
            f"{error.pos or 0}}}"
        ) from None
    apply_to = body.get("apply-to", "all")
    if apply_to not in APPLY_TO:
        shown = apply_to if isinstance(apply_to, str) else erlang_term(apply_to)
        raise _failed(
            f"apply-to '{shown}' unrecognised; should be one of: "
            + ", ".join(f"'{a}'" for a in APPLY_TO)
        )
    definition = body["definition"]
    if not isinstance(definition, dict):
        raise _failed(f"definition must be a dictionary: {erlang_term(definition)}")
    check_definition(definition, operator)
    return Policy(vhost, name, pattern, str(apply_to), priority, dict(definition))


def check_definition(definition: dict[str, Any], operator: bool = False) -> None:
    """Each known key's value in key order, then the unknown keys (RabbitMQ's order)."""
    if not definition:
        raise _failed("no policy provided")
    known = OPERATOR_KEYS if operator else tuple(VALIDATORS)
    for key in sorted(definition):
        if key in known:
            problem = VALIDATORS[key](definition[key])
            if problem is not None:
                raise _failed(problem)
    unknown = {k: definition[k] for k in sorted(definition) if k not in known}
    if unknown:
        raise _failed(f"{erlang_term(unknown)} are not recognised policy settings")


def ranked(policies: Iterable[Policy]) -> list[Policy]:
    """Policies in the order ``match`` tries them: highest priority first, then by name."""
    return sorted(policies, key=lambda p: (-p.priority, p.name))


def match(ranked_policies: list[Policy], kind: str, name: str) -> Policy | None:
    """The policy that applies: the first matching of ``ranked(policies)``, i.e. the
    highest priority of those matching (ties: by name)."""
    for policy in ranked_policies:
        if policy.applies(kind, name):
            return policy
    return None


def effective_definition(policy: Policy | None, operator: Policy | None) -> dict[str, Any]:
    """The policy's definition with the operator policy merged in (``/api/queues``'s
    ``effective_policy_definition``)."""
    out = dict(policy.definition) if policy is not None else {}
    if operator is not None:
        for key, value in operator.definition.items():
            out[key] = min(out[key], value) if key in out and key in MERGED_KEYS else value
    return out


def _lower(argument: int | None, policy: Any) -> int | None:
    if policy is None:
        return argument
    return int(policy) if argument is None else min(argument, int(policy))


def queue_arguments(declared: QueueArguments, effective: dict[str, Any]) -> QueueArguments:
    """A classic or quorum queue's working arguments: what it declared, with the
    effective policy applied key by key as RabbitMQ does (``table`` stays as declared)."""
    table = declared.table
    overflow = declared.overflow
    if "x-overflow" not in table and "overflow" in effective:
        overflow = str(effective["overflow"])
        if declared.kind == "quorum" and overflow == "reject-publish-dlx":
            overflow = "reject-publish"  # quorum queues have no reject-publish-dlx
    dlx = declared.dead_letter_exchange
    if dlx is None and "dead-letter-exchange" in effective:
        dlx = str(effective["dead-letter-exchange"])
    dlrk = declared.dead_letter_routing_key
    if dlrk is None and "dead-letter-routing-key" in effective:
        dlrk = str(effective["dead-letter-routing-key"])
    return dataclasses.replace(
        declared,
        message_ttl=_lower(declared.message_ttl, effective.get("message-ttl")),
        expires=_lower(declared.expires, effective.get("expires")),
        max_length=_lower(declared.max_length, effective.get("max-length")),
        max_length_bytes=_lower(declared.max_length_bytes, effective.get("max-length-bytes")),
        overflow=overflow,
        dead_letter_exchange=dlx,
        dead_letter_routing_key=dlrk,
        delivery_limit=_lower(declared.delivery_limit, effective.get("delivery-limit")),
    )


@dataclass(frozen=True)
class StreamLimits:
    """What a policy changes in a stream's storage: retention, segment and filter size."""

    max_bytes: int | None
    max_age_ms: int | None
    max_segment_bytes: int
    filter_size_bytes: int


def stream_limits(declared: StreamArguments, effective: dict[str, Any]) -> StreamLimits:
    """A stream's working limits: the lower of argument and policy for retention and
    segment size; the filter size a policy sets only where the declare left it out."""
    age = effective.get("max-age")
    policy_age = duration_ms(age) if isinstance(age, str) else None
    segment = declared.max_segment_size_bytes
    if "stream-max-segment-size-bytes" in effective:
        wanted = min(int(effective["stream-max-segment-size-bytes"]), MAX_STREAM_MAX_SEGMENT_SIZE)
        wanted = max(wanted, MIN_SEGMENT_BYTES)  # room for at least one chunk's header
        if "x-stream-max-segment-size-bytes" in declared.table:
            segment = min(segment, wanted)
        else:
            segment = wanted
    filter_size = declared.filter_size_bytes
    if "x-stream-filter-size-bytes" not in declared.table and FILTER_SIZE_KEY in effective:
        filter_size = int(effective[FILTER_SIZE_KEY])
    return StreamLimits(
        max_bytes=_lower(declared.max_length_bytes, effective.get("max-length-bytes")),
        max_age_ms=_lower(declared.max_age_ms, policy_age),
        max_segment_bytes=segment,
        filter_size_bytes=filter_size,
    )
