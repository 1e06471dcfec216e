"""RabbitMQ's list parameters: ``page``, ``page_size`` (<= 500), ``name``, ``use_regex``,
``sort``, ``sort_reverse``, ``columns``. Without ``page`` a list is answered as a plain JSON
array (filtered, sorted and trimmed to ``columns`` all the same), as RabbitMQ does."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from sievemq.admin_api.errors import ApiError
from sievemq.admin_api.slicing import Slicer

MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 100


def _invalid(page: str, size: str) -> ApiError:
    return ApiError(
        400,
        "invalid_pagination_parameters",
        f"Invalid pagination parameters: page number {page}, page size {size}",
    )


def _get(item: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(item, dict):
            return None
        item = item.get(part)
    return item


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, value)
    return (2, str(value))


def _columns(item: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column in columns:
        parts = column.split(".")
        value = _get(item, column)
        if value is None and column.split(".")[0] not in item:
            continue
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return out


Expand = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


async def paginate(
    request: Request,
    items: list[dict[str, Any]],
    slicer: Slicer | None = None,
    expand: Expand | None = None,
) -> Response:
    """The list (or the page of it) as a response, serialized directly (FastAPI's generic
    encoder is slow for thousands of objects) and in slices (this runs on the event loop).
    ``expand``: ``items`` are keys only (what filtering and sorting need), and this turns the
    page's keys into its objects."""
    return await (slicer or Slicer()).json_response(_paginate(request, items, expand))


def is_paged(request: Request) -> bool:
    """A page is asked for (``page`` or ``page_size``)."""
    q = request.query_params
    return "page" in q or "page_size" in q


def _paginate(request: Request, items: list[dict[str, Any]], expand: Expand | None) -> Any:
    q = request.query_params
    page_raw, size_raw = q.get("page"), q.get("page_size")
    name = q.get("name")
    filtered = items
    if name:
        if q.get("use_regex", "false").lower() == "true":
            try:
                pattern = re.compile(name)
            except re.error as error:
                raise ApiError(400, "bad_request", f"invalid regex '{name}': {error}") from None
            filtered = [i for i in items if pattern.search(str(i.get("name", "")))]
        else:
            filtered = [i for i in items if name in str(i.get("name", ""))]
    sort = q.get("sort")
    if sort:
        filtered = sorted(filtered, key=lambda i: _sort_key(_get(i, sort)))
    if q.get("sort_reverse", "false").lower() == "true":
        filtered = list(reversed(filtered))
    columns = [c for c in (q.get("columns") or "").split(",") if c]
    if page_raw is None and size_raw is None:
        filtered = expand(filtered) if expand is not None else filtered
        return [_columns(i, columns) for i in filtered] if columns else filtered
    try:
        page = int(page_raw) if page_raw is not None else 1
        size = int(size_raw) if size_raw is not None else DEFAULT_PAGE_SIZE
    except ValueError:
        raise _invalid(page_raw or "undefined", size_raw or "undefined") from None
    if page < 1 or not 1 <= size <= MAX_PAGE_SIZE:
        raise _invalid(page_raw or "undefined", size_raw or "undefined")
    page_count = max(1, math.ceil(len(filtered) / size))
    if page > page_count:
        raise _invalid(page_raw or "undefined", size_raw or "undefined")
    chunk = filtered[(page - 1) * size : page * size]
    if expand is not None:
        chunk = expand(chunk)
    return {
        "filtered_count": len(filtered),
        "item_count": len(chunk),
        "items": [_columns(i, columns) for i in chunk] if columns else chunk,
        "page": page,
        "page_count": page_count,
        "page_size": size,
        "total_count": len(items),
    }
