"""Stream queues: the queue, its arguments, deduplicated publishing, super streams."""
