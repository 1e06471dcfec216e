"""``/api/queues`` pages, as the dashboard asks for them: sorted by name, a page is built from
the queues' names and only its own rows get a view; any other sort builds every row. Both must
answer what the unpaged list answers, for every queue type and only the vhosts a user sees."""

from __future__ import annotations

from typing import Any

import httpx

from sievemq.testing import ServerProcess


def _rows(items: list[dict[str, Any]]) -> list[tuple[str, str, str, int]]:
    return [(i["vhost"], i["name"], i["type"], i["messages"]) for i in items]


def test_pages_sorted_by_name_match_the_whole_list(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.admin_url, auth=("guest", "guest")) as http:
        assert http.put("/api/vhosts/other").status_code in (201, 204)
        full = {"configure": ".*", "write": ".*", "read": ".*"}
        assert http.put("/api/permissions/other/guest", json=full).status_code in (201, 204)
        for i in range(12):
            kind = ("classic", "quorum", "stream")[i % 3]
            vhost = "%2F" if i % 4 else "other"
            body = {"durable": True, "arguments": {"x-queue-type": kind}}
            assert http.put(f"/api/queues/{vhost}/pg-{i:02d}", json=body).status_code == 201
        for _ in range(3):  # messages in pg-01 (a classic queue) for the sort by messages
            body = {"routing_key": "pg-01", "payload": "m", "payload_encoding": "string"}
            http.post("/api/exchanges/%2F/amq.default/publish", json={**body, "properties": {}})
        whole = http.get("/api/queues", params={"name": "pg-"}).json()
        assert len(whole) == 12
        for sort in ("name", "vhost", None, "messages"):
            params: dict[str, Any] = {"name": "pg-", "page_size": 5}
            if sort:
                params["sort"] = sort
            expected = sorted(whole, key=lambda q: q[sort]) if sort else whole
            got = []
            for page in (1, 2, 3):
                body = http.get("/api/queues", params={**params, "page": page}).json()
                assert body["filtered_count"] == 12 and body["page_count"] == 3
                got += body["items"]
            assert _rows(got) == _rows(expected), sort
            assert got[0].keys() == expected[0].keys()  # whole rows, not the keys
        regex = {"name": "^pg-0[0-4]$", "use_regex": "true", "page": 1, "sort": "name"}
        body = http.get("/api/queues", params=regex).json()
        assert [i["name"] for i in body["items"]] == [f"pg-0{i}" for i in range(5)]
        cols = {"page": 1, "page_size": 2, "sort": "name", "columns": "name,type"}
        assert http.get("/api/queues/other", params=cols).json()["items"] == [
            {"name": "pg-00", "type": "classic"},
            {"name": "pg-04", "type": "quorum"},
        ]
        # a user with no access to "other" sees none of its queues on any page
        http.put("/api/users/pager", json={"password": "pw", "tags": "management"})
        http.put("/api/permissions/%2F/pager", json={"configure": "", "write": "", "read": ".*"})
    with httpx.Client(base_url=server.admin_url, auth=("pager", "pw")) as http:
        body = http.get("/api/queues", params={"name": "pg-", "page": 1, "sort": "name"}).json()
        assert body["filtered_count"] == 9
        assert {i["vhost"] for i in body["items"]} == {"/"}
