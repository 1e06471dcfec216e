"""Sans-I/O AMQP 0-9-1 wire layer: frames, codecs, connection and channel state tables.

Imports only the standard library and pamqp: no sockets, no asyncio.
"""
