"""A vhost's metadata as RabbitMQ's ``PUT /api/vhosts/{name}`` takes it: checked before the
vhost changes, so that a bad value leaves it as it was."""

from __future__ import annotations

from sievemq.gateway.admin.errors import BadRequest

QUEUE_TYPES = ("classic", "quorum", "stream")


def vhost_metadata(
    description: object, tags: object, default_queue_type: object
) -> tuple[str | None, list[str] | None, str | None]:
    """(description, tags, default queue type), None for what was not given; 400 naming a
    bad value. Tags come as a list or a comma-separated string, as RabbitMQ takes them."""
    if description is not None and not isinstance(description, str):
        raise BadRequest(f"description must be a string, not {description!r}")
    return description, _tags(tags), _queue_type(default_queue_type)


def _tags(tags: object) -> list[str] | None:
    if tags is None:
        return None
    if isinstance(tags, str):
        items = tags.split(",")
    elif isinstance(tags, list) and all(isinstance(t, str) for t in tags):
        items = tags
    else:
        raise BadRequest(f"tags must be a list of strings or a comma-separated string: {tags!r}")
    return [t.strip() for t in items if t.strip()]


def _queue_type(value: object) -> str | None:
    if value is None or value == "":
        return None
    if value not in QUEUE_TYPES:
        raise BadRequest(
            f"default_queue_type {value!r} is not a queue type (classic, quorum, stream)"
        )
    return str(value)
