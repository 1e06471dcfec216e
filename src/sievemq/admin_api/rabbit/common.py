"""What several resources of RabbitMQ's management API share: the tags, the body base, the
vhost checks and the 201/204 answer."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from pydantic import BaseModel, ConfigDict, field_validator

from sievemq.admin_api.auth import require_vhost
from sievemq.admin_api.errors import ApiError, not_authorised, not_found
from sievemq.admin_api.paths import name
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import Principal

TAG = "RabbitMQ management API"
POLICIES_TAG = "RabbitMQ management API: policies and parameters"


class Body(BaseModel):
    """A request body: unknown keys are kept (RabbitMQ ignores them)."""

    model_config = ConfigDict(extra="allow")

    @field_validator("arguments", mode="before", check_fields=False)
    @classmethod
    def _empty_list_is_empty_table(cls, value: Any) -> Any:
        """Erlang-minded clients (pyrabbit2) send ``"arguments": []``; RabbitMQ takes it."""
        return {} if value == [] or value is None else value


def created(was_created: bool) -> Response:
    """201 when the PUT created the resource, 204 when it already existed."""
    return Response(status_code=201 if was_created else 204)


def need_vhost(f: BrokerFacade, vhost: str) -> None:
    """404 when the vhost does not exist."""
    if not f.vhost_exists(vhost):
        raise not_found()


def readable_vhost(f: BrokerFacade, who: Principal, raw: str) -> str:
    """The vhost of a path: 404 when it does not exist, then 401 when ``who`` may not read it."""
    v = name(raw)
    need_vhost(f, v)
    require_vhost(who, v)
    return v


def may_change(who: Principal, vhost: str) -> bool:
    """Policies and parameters: an administrator, or a permission in the vhost."""
    return who.is_administrator or vhost in who.permissions


def policy_vhost(f: BrokerFacade, who: Principal, raw: str) -> str:
    """The vhost of a policy or parameter path: 404 when it does not exist, 401 when the
    user has no access."""
    vhost = name(raw)
    if not f.vhost_exists(vhost):
        raise not_found()
    if not may_change(who, vhost):
        raise not_authorised(f"access to vhost '{vhost}' refused for user '{who.name}'")
    return vhost


def changed_policy_vhost(f: BrokerFacade, who: Principal, raw: str) -> str:
    """As ``policy_vhost``, with RabbitMQ's answer to a PUT into a missing vhost."""
    if not f.vhost_exists(name(raw)):
        raise ApiError(404, "not_found", "vhost_not_found")
    return policy_vhost(f, who, raw)
