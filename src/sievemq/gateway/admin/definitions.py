"""RabbitMQ's definitions document: export, and import checked as a whole before it is applied."""

from __future__ import annotations

from typing import Any

from sievemq.amqp.errors import AMQPError
from sievemq.gateway.admin.access import AccessAdmin, check_tags
from sievemq.gateway.admin.base import PRODUCT
from sievemq.gateway.admin.codec import jsonable
from sievemq.gateway.admin.policies import PoliciesAdmin
from sievemq.gateway.admin.queues import QueuesAdmin
from sievemq.gateway.admin.topology import TopologyAdmin
from sievemq.gateway.admin.vhost_metadata import vhost_metadata
from sievemq.gateway.admin.views import LIMITS_COMPONENT, VHOST_LIMITS, BadRequest, Definitions
from sievemq.gateway.model import policies
from sievemq.gateway.model.classic.arguments import (
    CLASSIC_TYPE_NAME,
    QUORUM_TYPE_NAME,
    validate_declare,
)
from sievemq.gateway.model.exchanges import EXCHANGE_TYPES
from sievemq.gateway.model.stream.arguments import STREAM_TYPE_ALIASES, validate_stream_declare
from sievemq.gateway.model.users import SHA256, check_regex, valid_hash


class DefinitionsAdmin(AccessAdmin, PoliciesAdmin, TopologyAdmin, QueuesAdmin):
    """Export and import of definitions, through the other sections' commands."""

    def export_definitions(self, vhost: str | None = None) -> Definitions:
        stored = self.broker.definitions()
        exchanges = [
            {k: x[k] for k in ("name", "vhost", "type", "durable", "auto_delete", "internal")}
            | {"arguments": jsonable(x["arguments"])}
            for x in stored["exchanges"]
            if vhost is None or x["vhost"] == vhost
        ]
        queues = [
            {
                "name": q["name"],
                "vhost": q["vhost"],
                "durable": True,
                "auto_delete": bool(q.get("auto_delete", False)),
                "arguments": jsonable(q["arguments"]),
            }
            | ({"type": str(q["type"])} if "type" in q else {})
            for q in stored["queues"]
            if vhost is None or q["vhost"] == vhost
        ]
        bindings = [
            {
                "source": b["source"],
                "vhost": b["vhost"],
                "destination": b["destination"],
                "destination_type": b["destination_type"],
                "routing_key": b["routing_key"],
                "arguments": jsonable(b["arguments"]),
            }
            for b in stored["bindings"]
            if vhost is None or b["vhost"] == vhost
        ]
        users = [
            {
                "name": u.name,
                "password_hash": u.password_hash,
                "hashing_algorithm": u.hashing_algorithm,
                "tags": list(u.tags),
                "limits": dict(u.limits),
            }
            for u in self.broker.users
        ]
        return Definitions(
            rabbit_version=self.version,
            rabbitmq_version=self.version,
            product_name=PRODUCT,
            product_version=self.version,
            users=users if vhost is None else [],
            vhosts=[
                {"name": n} | v.metadata() | {"metadata": v.metadata()}
                for n, v in self.broker.vhosts.items()
                if vhost is None or n == vhost
            ],
            permissions=[dict(p.__dict__) for p in self.list_permissions(vhost)],
            topic_permissions=[],
            parameters=[p.__dict__ for p in self.list_parameters(vhost=vhost)],
            global_parameters=(
                [{"name": p.name, "value": p.value} for p in self.list_global_parameters()]
                if vhost is None
                else []
            ),
            policies=[p.to_json() for p in self.list_policies(vhost)],
            queues=queues,
            exchanges=exchanges,
            bindings=bindings,
        )

    def import_definitions(self, data: dict[str, Any], vhost: str | None = None) -> None:
        """Merge a RabbitMQ definitions document. Everything is checked first; a document
        with objects SieveMQ cannot hold (queues of other types, topic permissions,
        parameters of components such as shovel or federation), bad hashes, bad regexes or
        bad policies is refused as a whole (400 naming them) and nothing is applied."""
        plan = _DefinitionsPlan(self, data, vhost)
        plan.check()
        plan.apply()


_UNSUPPORTED_SECTIONS = ("topic_permissions",)
_KNOWN_COMPONENTS = (policies.OPERATOR_COMPONENT, LIMITS_COMPONENT)


def _definition_queue_kind(q: dict[str, Any]) -> str:
    """stream, classic, quorum (or the unknown name) of a queue in a definitions file: its
    ``x-queue-type``, else its ``type``, else classic (RabbitMQ's files before 3.13)."""
    raw = (q.get("arguments") or {}).get("x-queue-type", q.get("type")) or "classic"
    text = str(raw)
    if text in STREAM_TYPE_ALIASES:
        return "stream"
    if text in ("classic", CLASSIC_TYPE_NAME):
        return "classic"
    if text in ("quorum", QUORUM_TYPE_NAME):
        return "quorum"
    return text


class _DefinitionsPlan:
    """Check a whole definitions document, then apply it (all or nothing)."""

    def __init__(self, facade: DefinitionsAdmin, data: dict[str, Any], vhost: str | None) -> None:
        self.facade = facade
        self.data = data
        self.vhost = vhost

    def _section(self, key: str) -> list[dict[str, Any]]:
        items = self.data.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise BadRequest(f"'{key}' must be a list of objects")
        if self.vhost is not None:
            return [dict(i, vhost=self.vhost) for i in items]
        return items

    def check(self) -> None:
        if not isinstance(self.data, dict):
            raise BadRequest("definitions must be a JSON object")
        problems: list[str] = []
        for key in _UNSUPPORTED_SECTIONS:
            items = self.data.get(key) or []
            if items:
                problems.append(f"{key} ({len(items)})")
        components: dict[str, int] = {}
        for p in self._section("parameters"):
            if p.get("component") not in _KNOWN_COMPONENTS:
                key = str(p.get("component"))
                components[key] = components.get(key, 0) + 1
        problems.extend(
            f"parameters of component '{c}' ({n})" for c, n in sorted(components.items())
        )
        for q in self._section("queues"):
            if _definition_queue_kind(q) not in ("stream", "classic", "quorum"):
                problems.append(
                    f"queue '{q.get('name')}' in vhost '{q.get('vhost')}' of type "
                    f"'{_definition_queue_kind(q)}'"
                )
        if problems:
            raise BadRequest("definitions refused, SieveMQ cannot hold: " + "; ".join(problems))
        known_vhosts = set(self.facade.broker.vhosts) | {
            str(v.get("name")) for v in self._section("vhosts")
        }
        if self.vhost is not None:
            known_vhosts.add(self.vhost)
        for v in self._section("vhosts"):
            try:
                _metadata(v)
            except BadRequest as error:
                raise BadRequest(f"vhost '{v.get('name')}': {error.explanation}") from None
        for u in self._section("users"):
            if not isinstance(u.get("name"), str) or not u["name"]:
                raise BadRequest("a user without a name")
            algorithm = u.get("hashing_algorithm", SHA256)
            if "password" in u and "password_hash" not in u:
                continue
            if not valid_hash(str(u.get("password_hash", "")), str(algorithm)):
                raise BadRequest(f"user '{u['name']}': bad password_hash or hashing_algorithm")
            tags = u.get("tags", [])
            if isinstance(tags, str):
                tags = [t for t in tags.split(",") if t]
            check_tags(tags)
        users = {u.name for u in self.facade.broker.users} | {
            str(u.get("name")) for u in self._section("users")
        }
        for p in self._section("permissions"):
            if p.get("user") not in users:
                raise BadRequest(f"permission for unknown user '{p.get('user')}'")
            if p.get("vhost") not in known_vhosts:
                raise BadRequest(f"permission in unknown vhost '{p.get('vhost')}'")
            for kind in ("configure", "write", "read"):
                problem = check_regex(str(p.get(kind, "")))
                if problem is not None:
                    raise BadRequest(f"invalid {kind} regex '{p.get(kind)}': {problem}")
        for key in ("queues", "exchanges", "bindings", "policies", "parameters"):
            for item in self._section(key):
                if item.get("vhost") not in known_vhosts:
                    raise BadRequest(f"{key[:-1]} in unknown vhost '{item.get('vhost')}'")
        for item in self._section("policies"):
            self._policy(item, item, operator=False)
        for item in self._section("parameters"):
            if item.get("component") == policies.OPERATOR_COMPONENT:
                self._policy(item, item.get("value"), operator=True)
            elif not isinstance(item.get("value"), dict) or not all(
                k in VHOST_LIMITS and isinstance(n, int) and not isinstance(n, bool)
                for k, n in item["value"].items()
            ):
                raise BadRequest(
                    f"vhost-limits of vhost '{item.get('vhost')}': an object of "
                    f"{', '.join(VHOST_LIMITS)} integers, not {item.get('value')!r}"
                )
        for item in self.data.get("global_parameters") or []:
            if not isinstance(item, dict) or "name" not in item or "value" not in item:
                raise BadRequest("a global parameter needs a name and a value")
        for x in self._section("exchanges"):
            if x.get("type") not in EXCHANGE_TYPES:
                raise BadRequest(f"exchange '{x.get('name')}' of unknown type '{x.get('type')}'")
        for q in self._section("queues"):
            kind = _definition_queue_kind(q)
            declared = (
                str(q["name"]),
                str(q["vhost"]),
                bool(q.get("durable", True)),
                False,  # (not exclusive)
                bool(q.get("auto_delete", False)),
                dict(q.get("arguments") or {}),
            )
            try:
                if kind == "stream":
                    validate_stream_declare(*declared)
                else:
                    validate_declare("quorum" if kind == "quorum" else "classic", *declared)
            except AMQPError as error:
                raise BadRequest(error.explanation) from None
            except KeyError as error:
                raise BadRequest(f"queue without {error}") from None

    @staticmethod
    def _policy(item: dict[str, Any], body: Any, operator: bool) -> policies.Policy:
        kind = "operator policy" if operator else "policy"
        try:
            return policies.parse(str(item.get("vhost")), str(item.get("name")), body, operator)
        except policies.PolicyError as error:
            raise BadRequest(
                f"{kind} '{item.get('name')}' in vhost '{item.get('vhost')}': {error.reason}"
            ) from None

    def apply(self) -> None:
        f = self.facade
        if self.vhost is None:
            for v in self._section("vhosts"):
                f.broker.add_vhost(str(v["name"]))
                f.broker.set_vhost_metadata(str(v["name"]), *_metadata(v))
            for g in self.data.get("global_parameters") or []:
                f.broker.global_parameters[str(g["name"])] = g["value"]
        # policies before the queues, so that those are declared under them
        for item in self._section("policies"):
            f.broker.vhost(str(item["vhost"])).set_policy(self._policy(item, item, False))
        for item in self._section("parameters"):
            vhost = f.broker.vhost(str(item["vhost"]))
            if item["component"] == policies.OPERATOR_COMPONENT:
                vhost.set_policy(self._policy(item, item["value"], True), operator=True)
            else:
                vhost.limits = {str(k): int(n) for k, n in item["value"].items()}
        for u in self._section("users"):
            tags = u.get("tags", [])
            if isinstance(tags, str):
                tags = [t for t in tags.split(",") if t]
            if "password_hash" in u:
                f.put_user(
                    u["name"],
                    tags=tags,
                    password_hash=str(u["password_hash"]),
                    hashing_algorithm=str(u.get("hashing_algorithm", SHA256)),
                )
            else:
                f.put_user(u["name"], password=str(u.get("password", "")), tags=tags)
        for p in self._section("permissions"):
            f.set_permission(
                str(p["user"]),
                str(p["vhost"]),
                str(p.get("configure", "")),
                str(p.get("write", "")),
                str(p.get("read", "")),
            )
        for x in self._section("exchanges"):
            f.declare_exchange(
                str(x["vhost"]),
                str(x["name"]),
                str(x["type"]),
                durable=bool(x.get("durable", True)),
                auto_delete=bool(x.get("auto_delete", False)),
                internal=bool(x.get("internal", False)),
                arguments=dict(x.get("arguments") or {}),
            )
        for q in self._section("queues"):
            arguments = dict(q.get("arguments") or {})
            kind = _definition_queue_kind(q)
            vhost = f.broker.vhost(str(q["vhost"]))
            if "x-queue-type" not in arguments and vhost.classic.kind_of(None) != kind:
                # RabbitMQ's file says the type in "type" (or nothing: classic); this
                # server's default queue type may be another
                arguments["x-queue-type"] = kind
            f.declare_stream(
                str(q["vhost"]),
                str(q["name"]),
                arguments,
                durable=bool(q.get("durable", True)),
                auto_delete=bool(q.get("auto_delete", False)),
            )
        for b in self._section("bindings"):
            f.bind(
                str(b["vhost"]),
                str(b["source"]),
                str(b.get("destination_type", "queue")),
                str(b["destination"]),
                str(b.get("routing_key", "")),
                dict(b.get("arguments") or {}),
            )
        f.broker.save_definitions()  # the policies, parameters and limits set above


def _metadata(item: dict[str, Any]) -> tuple[str | None, list[str] | None, str | None]:
    """An imported vhost's description, tags and default queue type: RabbitMQ 3.11+ puts
    them under ``metadata`` (and at the top); 3.10 exports have only the name."""
    meta = {**item, **dict(item.get("metadata") or {})}
    return vhost_metadata(meta.get("description"), meta.get("tags"), meta.get("default_queue_type"))
