"""FastAPI admin plane over the gateway's read/command facade."""

from sievemq.admin_api.app import create_app

__all__ = ["create_app"]
