"""The broker's model: vhosts, users, exchanges, routing, queues, arguments, reply texts.

What one queue family alone uses is in its subpackage, ``stream/`` (stream queues) or
``classic/`` (classic and quorum queues); what both share is here. No I/O.
"""
