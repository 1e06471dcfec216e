"""PySpark data source and export job over the stream store (not built yet)."""
