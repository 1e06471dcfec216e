"""Request bodies read by hand, with RabbitMQ's refusal texts, and the size cap on them.

Most routes take a pydantic model; these are for the ones whose body RabbitMQ checks key by
key (``{"value": N}``, ``POST .../get``, definitions) or that may come without a body.

RabbitMQ is lenient with some numbers: it reads them with ``rabbit_mgmt_util:parse_int``
(``parse_int`` here), and its own ``rabbitmqadmin`` always sends strings (``"count": "1"``).
Where RabbitMQ is strict (limits, message properties) the routes stay so.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel

from sievemq.admin_api.errors import ApiError

MAX_BODY_BYTES = 20 * 1024 * 1024  # RabbitMQ's management.http.max_body_size default
M = TypeVar("M", bound=BaseModel)


async def json_body(request: Request) -> Any:
    """The body as JSON: 413 over ``MAX_BODY_BYTES``, 400 ``not_json`` when it is not JSON."""
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "bad_request", "request body too large")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "bad_request", "not_json") from None


async def optional_json(request: Request, model: type[M]) -> M | None:
    """The body as ``model``, or None when there is none (RabbitMQ takes an empty PUT)."""
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return model.model_validate_json(raw)
    except ValueError:
        raise ApiError(400, "bad_request", "not_json") from None


_DIGITS = re.compile(r"[+-]?[0-9]+", re.ASCII)


def parse_int(value: Any) -> int:
    """``value`` as RabbitMQ's ``parse_int`` reads it: an integer, a float (truncated) or a
    string of digits with an optional sign; else 400 ``["not_integer", VALUE]`` as sent."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return math.trunc(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    error = ApiError(400, "bad_request")
    error.body = {"error": "bad_request", "reason": ["not_integer", value]}
    raise error
