"""The pieces of the access matrix that both profiles use (plain node: test_access_matrix.py; secured
cluster: tests/secured/test_secured_access.py): the victim's routes, sending, and the tally."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["MC", "SECRET", "Tally", "Victim", "send", "victim_routes"]

MC = "/_plugins/_ml/memory_containers"
SECRET = "alice-secret-" + uuid.uuid4().hex[:10]


@dataclass(frozen=True)
class Victim:
    label: str
    container_id: str
    memory_id: str  # a GoodMem memory id / long-term memory id in it
    long_term_index: str


# (method, path template, body, reports per item: a 2xx is fine when it carries nothing of Alice's)
def victim_routes(v: Victim) -> list[tuple[str, str, Any, bool]]:
    c, m = v.container_id, v.memory_id
    lt = f"{MC}/{c}/memories/long-term"
    return [
        ("GET", f"/v1/spaces/{c}", None, False),
        ("PUT", f"/v1/spaces/{c}", {"name": "pwned"}, False),
        ("DELETE", f"/v1/spaces/{c}", None, False),
        ("GET", f"/v1/spaces/{c}/memories", None, False),
        ("POST", "/v1/memories", {"spaceId": c, "originalContent": "pwned"}, False),
        (
            "POST",
            "/v1/memories",
            {"spaceId": c, "memoryId": str(uuid.uuid4()), "originalContent": "x"},
            False,
        ),
        ("GET", f"/v1/memories/{m}", None, False),
        ("GET", f"/v1/memories/{m}/content", None, False),
        ("GET", f"/v1/memories/{m}/pages", None, False),
        ("DELETE", f"/v1/memories/{m}", None, False),
        ("POST", "/v1/memories:batchGet", {"memoryIds": [m], "includeContent": True}, True),
        ("POST", "/v1/memories:batchDelete", {"requests": [{"memoryId": m}]}, True),
        ("POST", "/v1/memories:batchCreate", {"requests": [{"spaceId": c, "originalContent": "x"}]}, True),
        ("POST", "/v1/memories:retrieve", {"message": SECRET, "spaceKeys": [{"spaceId": c}]}, True),
        (
            "POST",
            "/v1/access-policy/grants",
            {
                "audience": {"allAuthenticated": True},
                "rule": {
                    "operation": "READ_MEMORY",
                    "selector": "EXACT",
                    "assignedResource": {"kind": "SPACE", "resourceId": c},
                },
            },
            False,
        ),
        ("GET", f"{MC}/{c}", None, False),
        ("PUT", f"{MC}/{c}", {"name": "pwned", "backend_roles": ["everyone"]}, False),
        ("DELETE", f"{MC}/{c}", None, False),
        ("POST", f"{MC}/{c}/memories", {"messages": [{"role": "user", "content": "pwned"}]}, False),
        ("POST", f"{MC}/{c}/memories/sessions", {"summary": "pwned"}, False),
        ("POST", f"{lt}/_semantic_search", {"query": SECRET, "k": 5}, False),
        ("POST", f"{lt}/_hybrid_search", {"query": SECRET, "k": 5}, False),
        ("POST", f"{lt}/_search", {"query": {"match_all": {}}}, False),
        ("POST", f"{MC}/{c}/memories/working/_search", {"query": {"match_all": {}}}, False),
        ("POST", f"{lt}/_delete_by_query", {"query": {"match_all": {}}}, False),
        ("GET", f"{lt}/{m}", None, False),
        ("PUT", f"{lt}/{m}", {"memory": "pwned"}, False),
        ("DELETE", f"{lt}/{m}", None, False),
        ("POST", f"{lt}/_memproxy_add", {"memory": "pwned"}, False),
        ("POST", f"{lt}/_memproxy_bulk", {"memories": [{"memory": "pwned"}]}, False),
        # Pass-through: the victim's data index, directly and through the multi-index routes.
        ("GET", f"/{v.long_term_index}/_search", None, False),
        # A secured cluster answers a refused document inside a 200 (the per-item shape).
        ("POST", "/_mget", {"docs": [{"_index": v.long_term_index, "_id": m}]}, True),
        ("POST", f"/{v.long_term_index}/_delete_by_query", {"query": {"match_all": {}}}, False),
    ]


def send(
    base_url: str, method: str, path: str, body: Any, headers: dict[str, str], verify: Any = True
) -> httpx.Response:
    kwargs: dict[str, Any] = {"headers": headers}
    if isinstance(body, (bytes, str)):
        kwargs["content"] = body
        kwargs["headers"] = {"Content-Type": "application/x-ndjson", **headers}
    elif body is not None:
        kwargs["json"] = body
    # A fresh client per attacker: the admin client's key must not ride along.
    with httpx.Client(base_url=base_url, verify=verify, timeout=120) as c:
        return c.request(method, path, **kwargs)


class Tally:
    def __init__(self) -> None:
        self.attempts = 0
        self.failures: list[str] = []
        self.leaks = 0
        self.server_errors = 0

    def check(self, what: str, resp: httpx.Response, refusals: set[int], per_item: bool) -> None:
        self.attempts += 1
        leaked = SECRET in resp.text
        self.leaks += leaked
        self.server_errors += resp.status_code >= 500
        ok = resp.status_code in refusals or (per_item and resp.status_code < 300 and not leaked)
        if leaked or not ok:
            self.failures.append(f"{what} -> {resp.status_code} {resp.text[:200]}")
