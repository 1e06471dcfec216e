"""FastAPI admin plane over the gateway's read/command facade."""
