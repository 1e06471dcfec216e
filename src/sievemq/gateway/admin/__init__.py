"""Typed read views and commands over the broker, by resource: what the admin plane may use.

``views`` holds the dataclasses the admin plane answers with and the errors it raises;
``codec`` shows field-table values and message properties as JSON.
"""
