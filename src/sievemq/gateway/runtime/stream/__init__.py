"""Stream queues at run time: the group-commit appender and the delivery waker."""
