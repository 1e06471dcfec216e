"""`sievemq publish`, `tail` (AMQP 0-9-1, aiormq); `streams`, `queues` member commands (HTTP).

For people at a terminal, as ``rabbitmqadmin publish``, a stream tail, or ``rabbitmq-streams``
and ``rabbitmq-queues`` for a cluster's stream replicas and quorum queue members (through a
node's admin API)."""
