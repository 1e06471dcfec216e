"""The broker's model: vhosts, users, exchanges, routing, queues, arguments, reply texts.

No I/O.
"""
