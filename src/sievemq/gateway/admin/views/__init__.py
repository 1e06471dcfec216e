"""The typed views and refusals of the admin plane: what ``admin_api`` may import.

Every view is a dataclass (FastAPI turns them into the OpenAPI schemas of SieveMQ's own
endpoints; the RabbitMQ-shaped answers are built from them in ``admin_api``). Refusals raise
the same ``amqp.errors`` classes as the AMQP side (404 NotFound, 406 PreconditionFailed, 403
AccessRefused, 540 NotImplemented_ ...), whose ``explanation`` is the text RabbitMQ would
send; the API maps them to HTTP statuses.
"""

from sievemq.amqp.errors import (
    AccessRefused,
    AMQPError,
    NotAllowed,
    NotFound,
    NotImplemented_,
    PreconditionFailed,
)
from sievemq.gateway.admin.errors import BadRequest
from sievemq.gateway.admin.views.access import (
    LIMITS_COMPONENT,
    USER_LIMITS,
    VHOST_LIMITS,
    Definitions,
    ParameterView,
    PermissionView,
    PolicyView,
    Principal,
    UserView,
    VhostView,
)
from sievemq.gateway.admin.views.clients import (
    ChannelView,
    ConnectionView,
    ConsumerFilterView,
    ConsumerView,
    SacGroupView,
    SacMemberView,
    StreamClientView,
    StreamConsumerView,
    StreamPublisherView,
)
from sievemq.gateway.admin.views.node import (
    ClusterNodeView,
    ClusterPort,
    DescriptorsView,
    HistogramView,
    HistoryPointView,
    ListenerView,
    OverviewView,
    RemoteQueueView,
    Totals,
    WriteLatencyView,
)
from sievemq.gateway.admin.views.queues import (
    BROWSE_MAX_LIMIT,
    GET_ACKMODES,
    BindingView,
    BrowsedMessage,
    BrowseResult,
    ConsumerOffsetView,
    ExchangeView,
    FilterAdviceView,
    GotMessage,
    QueueView,
    StreamView,
    SubscriptionView,
)
from sievemq.gateway.model.exchanges import EXCHANGE_TYPES
from sievemq.storage import FilterStats

__all__ = [
    "BROWSE_MAX_LIMIT",
    "EXCHANGE_TYPES",
    "GET_ACKMODES",
    "LIMITS_COMPONENT",
    "USER_LIMITS",
    "VHOST_LIMITS",
    "AMQPError",
    "AccessRefused",
    "BadRequest",
    "BindingView",
    "BrowseResult",
    "BrowsedMessage",
    "ChannelView",
    "ClusterNodeView",
    "ClusterPort",
    "ConnectionView",
    "ConsumerFilterView",
    "ConsumerOffsetView",
    "ConsumerView",
    "Definitions",
    "DescriptorsView",
    "ExchangeView",
    "FilterAdviceView",
    "FilterStats",
    "GotMessage",
    "HistogramView",
    "HistoryPointView",
    "ListenerView",
    "NotAllowed",
    "NotFound",
    "NotImplemented_",
    "OverviewView",
    "ParameterView",
    "PermissionView",
    "PolicyView",
    "PreconditionFailed",
    "Principal",
    "QueueView",
    "RemoteQueueView",
    "SacGroupView",
    "SacMemberView",
    "StreamClientView",
    "StreamConsumerView",
    "StreamPublisherView",
    "StreamView",
    "SubscriptionView",
    "Totals",
    "UserView",
    "VhostView",
    "WriteLatencyView",
]
