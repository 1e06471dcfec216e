"""The filter semantics every reader shares (gateway, Spark, admin).

The SQL dialect, the stored-message view and the subscription bits.
"""
