"""Stream queues over AMQP 0-9-1: consumers, their set-up (SQL filters, named consumers),
named consumers' offsets and the consumers' filter statistics."""
