"""The broker core on asyncio: vhosts, exchanges, stream queues, consumers, filters."""
