"""The node: appenders, resource alarms, the process-wide state of a running gateway.

Stream queues' appender and waker are in ``stream/``, classic and quorum queues' appender and
expiry in ``classic/``; the node, alarms and what both share are here.
"""
