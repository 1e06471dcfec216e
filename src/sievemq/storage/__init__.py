"""The chunked stream store: a plain synchronous library (no asyncio, no protocol).

The Spark job imports it on its own, so it depends only on the standard library, mmh3
and zstandard.
"""
