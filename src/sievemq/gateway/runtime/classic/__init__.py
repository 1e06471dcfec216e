"""Classic and quorum queues at run time: the group-commit appender, x-expires."""
