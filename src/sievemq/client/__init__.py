"""`sievemq publish`, `tail` (AMQP 0-9-1, aiormq) and `streams add_replica ...` (HTTP).

For people at a terminal, as ``rabbitmqadmin publish``, a stream tail, or ``rabbitmq-streams``
for a cluster's stream replicas (through a node's admin API)."""
