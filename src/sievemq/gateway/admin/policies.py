"""Policies, operator policies and runtime parameters (vhost limits, global parameters)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sievemq.amqp.errors import NotFound
from sievemq.gateway.admin.base import AdminBase
from sievemq.gateway.admin.views import (
    LIMITS_COMPONENT,
    VHOST_LIMITS,
    BadRequest,
    ParameterView,
    PolicyView,
)
from sievemq.gateway.model import policies


class PoliciesAdmin(AdminBase):
    """Policies and runtime parameters."""

    def list_policies(self, vhost: str | None = None, operator: bool = False) -> list[PolicyView]:
        """Policies (or operator policies) of every vhost or of one, by vhost and name."""
        out: list[PolicyView] = []
        for v in self._vhosts(vhost):
            table = v.operator_policies if operator else v.policies
            out.extend(_policy_view(p) for _, p in sorted(table.items()))
        return out

    def get_policy(self, vhost: str, name: str, operator: bool = False) -> PolicyView:
        v = self.broker.vhost(vhost)
        policy = (v.operator_policies if operator else v.policies).get(name)
        if policy is None:
            raise NotFound(f"no policy '{name}' in vhost '{vhost}'")
        return _policy_view(policy)

    def put_policy(
        self, vhost: str, name: str, body: Any, operator: bool = False, apply: bool = True
    ) -> bool:
        """Validate (400 with RabbitMQ's text), store, and apply to the vhost's queues and
        exchanges (``apply=False``: the caller runs ``policy_steps``); True when new."""
        v = self.broker.vhost(vhost)
        try:
            policy = policies.parse(vhost, name, body, operator)
        except policies.PolicyError as error:
            raise BadRequest(error.reason) from None
        created = v.set_policy(policy, operator, apply)
        self.broker.save_policy(vhost, name, operator)
        return created

    def delete_policy(
        self, vhost: str, name: str, operator: bool = False, apply: bool = True
    ) -> None:
        if not self.broker.vhost(vhost).clear_policy(name, operator, apply):
            raise NotFound(f"no policy '{name}' in vhost '{vhost}'")
        self.broker.save_policy(vhost, name, operator)

    def policy_steps(self, vhost: str) -> Iterator[None]:
        """Re-apply the vhost's policies one object at a time (see ``VirtualHost``)."""
        v = self.broker.vhosts.get(vhost)
        return iter(()) if v is None else v.policy_steps()

    def list_parameters(
        self, component: str | None = None, vhost: str | None = None
    ) -> list[ParameterView]:
        """RabbitMQ's runtime parameters: operator policies and vhost limits (the only
        components a broker without the shovel and federation plugins has)."""
        out: list[ParameterView] = []
        for v in self._vhosts(vhost):
            if component in (None, policies.OPERATOR_COMPONENT):
                out.extend(
                    ParameterView(policies.OPERATOR_COMPONENT, v.name, n, p.value())
                    for n, p in sorted(v.operator_policies.items())
                )
            if component in (None, LIMITS_COMPONENT) and v.limits:
                out.append(ParameterView(LIMITS_COMPONENT, v.name, "limits", dict(v.limits)))
        return out

    def get_parameter(self, component: str, vhost: str, name: str) -> ParameterView:
        for p in self.list_parameters(component, vhost):
            if p.name == name:
                return p
        raise NotFound(f"no parameter '{name}' of component '{component}' in vhost '{vhost}'")

    def put_parameter(
        self, component: str, vhost: str, name: str, value: Any, apply: bool = True
    ) -> bool:
        """Set an operator policy or the vhost's limits; other components are unknown here
        (400 as RabbitMQ without the plugin answers). True when it is new."""
        if component == "policy":
            raise BadRequest("policies may not be set using this method")
        v = self.broker.vhost(vhost)
        if component == policies.OPERATOR_COMPONENT:
            return self.put_policy(vhost, name, value, operator=True, apply=apply)
        if component != LIMITS_COMPONENT:
            raise BadRequest(f"Validation failed\n\ncomponent {component} not found\n")
        if not isinstance(value, dict):
            raise BadRequest(f"Validation failed\n\nlimits must be a dictionary: {value!r}\n")
        for key, limit in value.items():
            if key not in VHOST_LIMITS:
                raise BadRequest(
                    f"Validation failed\n\nUnrecognised terms "
                    f"{policies.erlang_term({key: limit})} in limits\n"
                )
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise BadRequest(
                    f"Validation failed\n\n{key} should be a number, actually was "
                    f"{policies.erlang_term(limit)}\n"
                )
        created = not v.limits
        v.limits = {str(k): int(n) for k, n in value.items()}
        self.broker.save_definitions()
        return created

    def delete_parameter(self, component: str, vhost: str, name: str, apply: bool = True) -> None:
        self.get_parameter(component, vhost, name)  # 404 first
        if component == policies.OPERATOR_COMPONENT:
            self.delete_policy(vhost, name, operator=True, apply=apply)
            return
        self.broker.vhost(vhost).limits = {}
        self.broker.save_definitions()

    def list_global_parameters(self) -> list[ParameterView]:
        return [
            ParameterView("", "", n, value)
            for n, value in sorted(self.broker.global_parameters.items())
        ]

    def get_global_parameter(self, name: str) -> ParameterView:
        if name not in self.broker.global_parameters:
            raise NotFound(f"no global parameter '{name}'")
        return ParameterView("", "", name, self.broker.global_parameters[name])

    def put_global_parameter(self, name: str, value: Any) -> bool:
        created = name not in self.broker.global_parameters
        self.broker.global_parameters[name] = value
        self.broker.save_global_parameter(name)
        return created

    def delete_global_parameter(self, name: str) -> None:
        if self.broker.global_parameters.pop(name, None) is None:
            raise NotFound(f"no global parameter '{name}'")
        self.broker.save_global_parameter(name)


def _policy_view(p: policies.Policy) -> PolicyView:
    return PolicyView(p.vhost, p.name, p.pattern, p.apply_to, dict(p.definition), p.priority)
