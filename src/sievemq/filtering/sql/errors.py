"""The one error a SQL filter expression can raise: rejected when the consumer subscribes.

Stdlib only (the SQL package must not import the AMQP layer); the gateway maps it to the
AMQP reply code named here, 406 PRECONDITION_FAILED, like RabbitMQ does for a bad filter.
"""

from __future__ import annotations


class CompileError(ValueError):
    """An expression that cannot be compiled, with the 1-based character position at fault.

    ``str(error)`` reads ``syntax error at position 14: expected a value after '=' but found
    end of expression``; ``position`` and ``message`` hold the two parts.
    """

    reply_code: int = 406  # PRECONDITION_FAILED: the gateway closes the channel with it

    def __init__(self, position: int, message: str, kind: str = "syntax error") -> None:
        self.position = position
        self.message = message
        self.kind = kind
        super().__init__(f"{kind} at position {position}: {message}")
