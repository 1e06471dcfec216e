"""The RabbitMQ Stream protocol's session layer: connections, publishers, subscriptions.

Uses the same broker, vhosts, users, storage and appenders as the AMQP 0-9-1 session layer
(``gateway.session``); frames are parsed and built by the sans-I/O ``sievemq.streamproto``.
The socket side lives in ``gateway.net.stream_protocol``.
"""
