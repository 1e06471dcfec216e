"""``BrokerFacade``: the admin plane's one object, composed of a section per resource."""

from __future__ import annotations

from sievemq.gateway.admin.browse import BrowseAdmin
from sievemq.gateway.admin.consumers import ConsumersAdmin
from sievemq.gateway.admin.definitions import DefinitionsAdmin
from sievemq.gateway.admin.offsets import OffsetsAdmin
from sievemq.gateway.admin.overview import OverviewAdmin
from sievemq.gateway.admin.replicas import ReplicasAdmin
from sievemq.gateway.admin.sampling import SamplingAdmin

__all__ = ["BrokerFacade"]


class BrokerFacade(
    DefinitionsAdmin,  # and through it access, policies, topology, queues
    OverviewAdmin,
    SamplingAdmin,  # and through it connections
    ConsumersAdmin,
    BrowseAdmin,
    OffsetsAdmin,
    ReplicasAdmin,
):
    """What the admin plane may see and do."""
