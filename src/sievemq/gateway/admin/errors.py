"""The admin plane's own refusal, beside the AMQP errors it raises as the AMQP side does."""

from __future__ import annotations

from sievemq.amqp.errors import PreconditionFailed


class BadRequest(PreconditionFailed):
    """Input the admin plane refuses (HTTP 400 bad_request); nothing was changed."""


class Conflict(PreconditionFailed):
    """A change the object's current state forbids (HTTP 409), e.g. removing a stream's
    leader from its members; nothing was changed."""
