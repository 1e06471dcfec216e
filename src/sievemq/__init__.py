"""SieveMQ: an AMQP 0-9-1 gateway for stream queues with broker-side filtering."""

__version__ = "0.1.0"
