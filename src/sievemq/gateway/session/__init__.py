"""One AMQP 0-9-1 client's session: connections, channels, confirms, consumers.

Consuming a stream queue is in ``stream/``, a classic or quorum queue in ``classic/``; what both
share (connection, channel, confirms, transactions, the publish cache) is here. The RabbitMQ
Stream protocol's session is ``gateway.streamproto_session``.
"""
