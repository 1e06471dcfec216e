"""One client's session: connections, channels, consumers, confirms, named consumers."""
