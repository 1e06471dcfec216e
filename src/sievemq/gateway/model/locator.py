"""``x-queue-leader-locator``: which node a new queue of a cluster is placed on.

``client-local`` (RabbitMQ's default) places it on the node that received the declare,
``balanced`` on the live node leading the fewest queues. RabbitMQ 3.10+ still accepts the
older ``random``, ``least-leaders`` and ``min-masters`` and treats them as ``balanced``; so
does SieveMQ. The argument wins over a policy's ``queue-leader-locator`` key. A single node
checks the value and places every queue on itself.
"""

from __future__ import annotations

from typing import Any

from sievemq.amqp.errors import PreconditionFailed
from sievemq.gateway.model.replies import rs

ARGUMENT = "x-queue-leader-locator"
POLICY_KEY = "queue-leader-locator"
CLIENT_LOCAL = "client-local"
BALANCED = "balanced"
LEGACY_BALANCED = ("random", "least-leaders", "min-masters")
ACCEPTED = (CLIENT_LOCAL, BALANCED, *LEGACY_BALANCED)


def normalised(value: Any) -> str | None:
    """``client-local`` or ``balanced`` for an accepted value, else None."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if not isinstance(text, str) or text not in ACCEPTED:
        return None
    return CLIENT_LOCAL if text == CLIENT_LOCAL else BALANCED


def check_argument(arguments: dict[str, Any] | None, queue: str, vhost: str) -> str | None:
    """The declare's locator argument, normalised, or None without one; a value that is
    not a locator is a 406 naming the argument and the values it takes."""
    if not arguments or ARGUMENT not in arguments:
        return None
    locator = normalised(arguments[ARGUMENT])
    if locator is None:
        raise PreconditionFailed(
            f"invalid arg '{ARGUMENT}' for {rs('queue', queue, vhost)}: "
            f"{arguments[ARGUMENT]!r} is not a leader locator; use 'client-local' or "
            "'balanced' (RabbitMQ's older 'random', 'least-leaders' and 'min-masters' "
            "mean 'balanced')"
        )
    return locator


def effective(argument: str | None, policy_definition: dict[str, Any]) -> str:
    """The locator a new queue is placed by: its argument, else its policy's, else
    ``client-local``."""
    if argument is not None:
        return argument
    return normalised(policy_definition.get(POLICY_KEY)) or CLIENT_LOCAL
