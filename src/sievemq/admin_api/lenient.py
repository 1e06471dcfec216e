"""RabbitMQ's leniency with JSON bodies: numbers where it takes numeric strings.

RabbitMQ's management plugin reads some body fields with ``rabbit_mgmt_util:parse_int``: an
integer, a float (truncated) or a string of decimal digits with an optional sign is taken,
anything else is ``400 {"error":"bad_request","reason":["not_integer", VALUE]}`` with the value
as sent. Its own ``rabbitmqadmin`` always sends strings (``"count": "1"``), so a stricter
check breaks it. Where RabbitMQ is strict (limits, message properties) the routes stay so.
"""

from __future__ import annotations

import math
import re
from typing import Any

from sievemq.admin_api.errors import ApiError

_DIGITS = re.compile(r"[+-]?[0-9]+", re.ASCII)


def parse_int(value: Any) -> int:
    """``value`` as RabbitMQ's ``parse_int`` reads it, or its 400 ``not_integer``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return math.trunc(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    error = ApiError(400, "bad_request")
    error.body = {"error": "bad_request", "reason": ["not_integer", value]}
    raise error
