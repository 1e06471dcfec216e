"""Classic and quorum queues: the queue, its arguments, a vhost's share of them."""
