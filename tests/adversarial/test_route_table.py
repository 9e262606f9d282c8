"""Authorization cannot be bypassed by the route table: every route memproxy mounts, walked from the
application itself, refuses an anonymous caller (but the public ones) and a caller without the right.

The routes come from ``proxy.app.make_app`` (not from a list kept here), so a route added later is walked
too, and must be classified: public, self-service (acts only on the caller's own things, or on none), or
guarded (filled with another tenant's real resources and refused).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from proxy.api.identity import CONSOLE_PREFIX, PUBLIC_ROUTES
from proxy.app import make_app
from proxy.config import Settings
from tests.adversarial.tenants import Tenant, make_tenant
from tests.opensearch_memory_helpers import EMBEDDER, new_prefix

pytestmark = pytest.mark.timeout(600)

MC = "/_plugins/_ml/memory_containers"

# Routes that act only on the caller's own things (or on nothing stored): any authenticated caller may
# call them, and what they answer is the caller's (the access matrix checks that nothing of others shows).
SELF_SERVICE = {
    ("POST", f"{MC}/_create"),
    ("GET", f"{MC}/_search"),
    ("POST", f"{MC}/_search"),
    # Erases within the containers whose memories the caller may delete (tests/test_erasure.py checks that
    # another tenant's container sharing the indices keeps its memories).
    ("POST", f"{MC}/_memproxy_erase"),
    ("*", f"{MC}/_memproxy_erase"),
    ("*", f"{MC}/_create"),
    ("*", f"{MC}/_search"),
    # The method fallbacks (405) of the cluster-wide retention routes, whose POSTs need an administrator.
    ("*", f"{MC}/_retention/_dry_run"),
    ("*", f"{MC}/_retention/_execute"),
    ("*", MC),
    ("*", MC + "/{tail}"),
    ("GET", "/v1/instance"),
    ("POST", "/v1/apikeys"),
    ("GET", "/v1/apikeys"),
    ("GET", "/v1/users/me"),
    ("GET", "/v1/users"),
    ("GET", "/v1/embedders"),
    ("GET", "/v1/embedders/{id}"),
    ("POST", "/v1/embedders"),
    ("GET", "/v1/{kind}"),
    ("POST", "/v1/{kind}"),
    ("*", "/v1/{kind}/{id}"),
    ("POST", "/v1/spaces"),
    ("GET", "/v1/spaces"),
    ("GET", "/v1/access-policy/grants"),
    # A check answers about the caller's own rights, and says "false" for what they may not see.
    ("POST", "/v1/access-policy:check"),
    ("*", "/v1/{tail}"),
    ("*", "/v1"),
    # OCR reads nothing stored and stores nothing: any authenticated caller may use it.
    ("POST", "/v1/ocr:document"),
    ("POST", "/openai/v1/embeddings"),
    ("GET", "/openai/v1/models"),
    ("GET", "/openai/v1/models/{model}"),
    ("*", "/openai/{tail}"),
    ("*", "/openai"),
    # ml-commons' model APIs: models are shared by every caller (reads for anyone authenticated; writes
    # answer a non-administrator 403), so their searches and the method fallbacks of their literal paths
    # show nothing of anyone's own.
    *(
        (method, f"/_plugins/_ml/{kind}/{action}")
        for kind, action in (
            ("connectors", "_create"),
            ("connectors", "_search"),
            ("model_groups", "_register"),
            ("model_groups", "_search"),
            ("models", "_register"),
            ("models", "_search"),
        )
        for method in ("*", "GET", "POST")
    ),
}
# Batch routes answer 200 with a refusal per item; the access matrix checks each item.
PER_ITEM = {
    ("POST", "/v1/memories:batchGet"),
    ("POST", "/v1/memories:batchDelete"),
    ("POST", "/v1/memories:batchCreate"),
}


@dataclass
class Resources:
    values: dict[str, str]
    bodies: dict[tuple[str, str], Any]


@pytest.fixture(scope="module")
def tenants(proxy_url: str, admin_key: str) -> Iterator[tuple[Tenant, Tenant, Resources]]:
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": admin_key}, timeout=120) as admin:
        alice, bob, carol = (make_tenant(admin, n) for n in ("alice", "bob", "carol"))
        a = alice.headers
        space = admin.post(
            "/v1/spaces",
            headers=a,
            json={"name": f"rt-{uuid.uuid4().hex[:6]}", "spaceEmbedders": [{"embedderId": EMBEDDER}]},
        ).json()["spaceId"]
        memory = admin.post(
            "/v1/memories", headers=a, json={"spaceId": space, "originalContent": "alice's"}
        ).json()
        made = admin.post(
            f"{MC}/_create",
            headers=a,
            json={
                "name": "rt",
                "configuration": {
                    "embedding_model_type": "TEXT_EMBEDDING",
                    "embedding_model_id": EMBEDDER,
                    "embedding_dimension": 384,
                    "index_prefix": new_prefix("rt"),
                },
            },
        ).json()["memory_container_id"]
        lt = admin.post(
            f"{MC}/{made}/memories/long-term/_memproxy_add", headers=a, json={"memory": "alice's"}
        ).json()
        grant = admin.post(
            "/v1/access-policy/grants",
            headers=a,
            json={
                "audience": {"principalId": carol.user_id},
                "rule": {
                    "operation": "READ_MEMORY",
                    "selector": "EXACT",
                    "assignedResource": {"kind": "SPACE", "resourceId": space},
                },
            },
        ).json()["grantId"]
        user = admin.get(f"/v1/users/{alice.user_id}").json()
        # A model of alice's own, for the routes that use a model by id (ping): bob may not read it. Nothing
        # listens at its endpoint; a refusal comes before any call.
        reranker = admin.post(
            "/v1/rerankers",
            headers=a,
            json={
                "displayName": "rt",
                "providerType": "TEI",
                "endpointUrl": "http://127.0.0.1:9",
                "modelIdentifier": f"rt-{uuid.uuid4().hex[:6]}",
            },
        )
        assert reranker.status_code == 201, reranker.text
        reranker_id = reranker.json()["rerankerId"]
        values = {
            "/v1/spaces/": space,
            "/v1/memories/": memory["memoryId"],
            "/v1/apikeys/": alice.key_id,
            "/v1/users/email/": user["email"],
            "/v1/users/username/": user.get("username") or "alice",
            "/v1/users/": alice.user_id,
            "/v1/access-policy/grants/": grant,
            "/v1/embedders/": EMBEDDER,
            "memory_container_id": made,
            "memory_type": "long-term",
            "memory_id": lt["long_term_memory_id"],
            "spaceId": space,
        }
        bodies: dict[tuple[str, str], Any] = {
            ("PUT", "/v1/spaces/{id}"): {"name": "pwned"},
            ("POST", "/v1/spaces/{id}:transferOwnership"): {"newOwnerId": alice.user_id},
            ("POST", "/v1/admin/background-jobs:purge"): {"olderThan": "2000-01-01T00:00:00Z"},
            ("PUT", "/v1/apikeys/{id}"): {"status": "INACTIVE"},
            ("PUT", "/v1/users/{id}"): {"displayName": "pwned"},
            ("PUT", "/v1/embedders/{id}"): {"displayName": "pwned"},
            ("POST", "/v1/users"): {"email": f"x-{uuid.uuid4().hex[:6]}@example.com", "displayName": "x"},
            ("POST", "/v1/memories"): {"spaceId": space, "originalContent": "pwned"},
            ("POST", "/v1/memories:retrieve"): {"message": "alice", "spaceKeys": [{"spaceId": space}]},
            ("GET", "/v1/memories:retrieve"): f"?message=alice&spaceIds={space}",
            ("POST", "/v1/memories:batchCreate"): {"requests": [{"spaceId": space, "originalContent": "x"}]},
            ("POST", "/v1/memories:batchGet"): {"memoryIds": [memory["memoryId"]]},
            ("POST", "/v1/memories:batchDelete"): {"requests": [{"memoryId": memory["memoryId"]}]},
            ("POST", "/v1/access-policy/grants"): {
                "audience": {"allAuthenticated": True},
                "rule": {
                    "operation": "READ_MEMORY",
                    "selector": "EXACT",
                    "assignedResource": {"kind": "SPACE", "resourceId": space},
                },
            },
            ("PUT", MC + "/{memory_container_id}"): {"name": "pwned"},
            ("POST", MC + "/{memory_container_id}/memories"): {
                "messages": [{"role": "user", "content": "x"}]
            },
            ("POST", MC + "/{memory_container_id}/memories/sessions"): {"summary": "x"},
            ("POST", MC + "/{memory_container_id}/memories/long-term/_memproxy_add"): {"memory": "x"},
            ("POST", MC + "/{memory_container_id}/memories/long-term/_memproxy_bulk"): {
                "memories": [{"memory": "x"}]
            },
            ("PUT", MC + "/{memory_container_id}/memories/{memory_type}/{memory_id}"): {"memory": "x"},
            ("POST", "/v1/ping:once"): {"targetId": reranker_id},
            ("POST", "/v1/ping:stream"): {"targetId": reranker_id},
        }
        yield alice, bob, Resources(values, bodies)
        admin.delete(f"/v1/spaces/{space}")
        admin.delete(f"/v1/rerankers/{reranker_id}")
        admin.delete(f"{MC}/{made}", params={"delete_all_memories": "true"})


def _is_console(canonical: str) -> bool:
    # The console (a sub-application) signs people in with a form and a cookie, not an API credential: a
    # caller without that cookie (anonymous, or with only an API key) is sent to its login page.
    return canonical == CONSOLE_PREFIX or canonical.startswith(CONSOLE_PREFIX + "/")


def _console_public(method: str, canonical: str) -> bool:
    """The console's sign-in form, sign-out and its static files (CSS, JS): no data behind them."""
    rest = canonical[len(CONSOLE_PREFIX) :]
    return rest in ("/login", "/logout") or rest.startswith("/static")


def _console_refuses(resp: httpx.Response, what: Any) -> None:
    assert resp.status_code in (303, 401, 403, 404, 405) or "/login" in str(resp.url), what
    if resp.status_code == 303:
        assert resp.headers["Location"].startswith(CONSOLE_PREFIX + "/login"), what


def _routes() -> list[tuple[str, str]]:
    app = make_app(Settings())
    return sorted({(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None})


def _fill(canonical: str, values: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name, _, pattern = match.group(1).partition(":")
        if name in values:
            return values[name]
        prefix = canonical[: match.start()]
        for key, v in values.items():
            if key.startswith("/") and prefix.endswith(key):
                return v
        return pattern.split("|")[0] if pattern and "|" in pattern else "x"

    return re.sub(r"\{([^}]+)\}", value, canonical)


def _methods(method: str) -> list[str]:
    return ["GET", "POST", "PUT", "DELETE"] if method == "*" else [method]


def test_every_route_refuses_an_anonymous_caller(proxy_url: str) -> None:
    checked = 0
    with httpx.Client(base_url=proxy_url, timeout=60) as anon:
        for method, canonical in _routes():
            for m in _methods(method):
                path = _fill(canonical, {})
                resp = anon.request(m, path)
                checked += 1
                if _is_console(canonical):
                    if not _console_public(m, canonical):
                        _console_refuses(resp, (m, path, resp.status_code))
                elif (m, canonical) in PUBLIC_ROUTES:
                    assert resp.status_code != 401, (m, path)
                else:
                    assert resp.status_code == 401, (m, path, resp.status_code, resp.text[:200])
    print(f"\nroute table, anonymous: {checked} calls")
    assert checked > 100


def test_every_guarded_route_refuses_a_caller_without_the_right(
    proxy_url: str, tenants: tuple[Tenant, Tenant, Resources]
) -> None:
    alice, bob, res = tenants
    checked = 0
    with httpx.Client(base_url=proxy_url, timeout=60) as client:
        for method, canonical in _routes():
            if (method, canonical) in PUBLIC_ROUTES or method == "HEAD":
                continue
            if _is_console(canonical):
                for m in _methods(method):
                    resp = client.request(m, _fill(canonical, res.values), headers=bob.headers)
                    checked += 1
                    if not _console_public(m, canonical):
                        _console_refuses(resp, (m, canonical, resp.status_code))
                    assert res.values["spaceId"] not in resp.text
                continue
            for m in _methods(method):
                path = _fill(canonical, res.values)
                body = res.bodies.get((m, canonical))
                if isinstance(body, str):  # a query string
                    path, body = path + body, None
                resp = client.request(m, path, json=body, headers=bob.headers)
                checked += 1
                what = (m, canonical, resp.status_code, resp.text[:200])
                assert resp.status_code < 500, what
                assert resp.status_code != 401, what  # bob is authenticated everywhere
                if (method, canonical) in SELF_SERVICE:
                    # What a self-service route answers is the caller's: nothing of alice's in it.
                    for secret in (
                        res.values["/v1/users/email/"],
                        res.values["spaceId"],
                        res.values["memory_container_id"],
                    ):
                        assert secret not in resp.text, what
                    continue
                if (m, canonical) in PER_ITEM:
                    assert resp.status_code < 300 and "alice's" not in resp.text, what
                    continue
                assert resp.status_code in (403, 404), what
    print(f"route table, another tenant: {checked} calls")
    # Alice's things survived bob's walk.
    with httpx.Client(base_url=proxy_url, headers=alice.headers, timeout=60) as mine:
        assert mine.get(f"/v1/memories/{res.values['/v1/memories/']}").status_code == 200
        assert mine.get(f"{MC}/{res.values['memory_container_id']}").json()["name"] == "rt"
