"""The RabbitMQ Stream protocol (port 5552) as sans-I/O code: no asyncio, no sockets.

``wire`` parses client frames and encodes server frames, ``osiris`` builds the chunk a
Deliver carries, ``amqp10`` encodes and decodes AMQP 1.0 message sections, and ``convert``
maps them to and from the stored AMQP 0-9-1 properties by RabbitMQ's rules. The session layer
(``sievemq.gateway.streamproto_session``) and the listener (``sievemq.gateway.net``) use them.
"""
