"""The only socket code: listeners, transports, TLS and connection limits."""
