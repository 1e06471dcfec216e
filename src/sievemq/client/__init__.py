"""`sievemq publish` and `sievemq tail`: a small AMQP 0-9-1 client for streams (aiormq).

For people at a terminal, as ``rabbitmqadmin publish`` or a stream tail."""
