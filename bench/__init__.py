"""Benchmarks: `python -m bench <name>`; each prints JSON to stdout."""
