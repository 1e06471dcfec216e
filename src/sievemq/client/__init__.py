"""`sievemq publish` and `sievemq tail`: a small AMQP 0-9-1 client for streams, built on
aiormq, for people at a terminal (as ``rabbitmqadmin publish`` or a stream tail)."""
