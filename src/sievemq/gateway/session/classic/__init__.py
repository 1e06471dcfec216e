"""Classic and quorum queues over AMQP 0-9-1: consume, get, settle, purge, and their frames."""
