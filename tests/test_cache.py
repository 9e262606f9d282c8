"""The read caches (proxy.core.cache): the cache itself, then what a client sees through the real proxy.

Writes through one process are seen by it at once; another process sees them within its TTL (here a second
proxy with ``--cache-ttl-s 1`` next to the session's proxy). No assertion depends on how fast the host is:
the cache's own tests run on a fake clock, and the TTL bound across processes is checked on the order of
events (a request that starts after the cached entry expired must see the change), not on elapsed time.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from proxy.core.cache import Caches, TtlCache
from tests.adversarial.tenants import Tenant, make_tenant
from tests.conftest import ProxyProcess
from tests.goodmem_helpers import root_api_key
from tests.opensearch_memory_helpers import EMBEDDER, MC

pytestmark = pytest.mark.timeout(300)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Loader:
    """Counts loads; each returns the next integer, optionally after a gate opens or with an error."""

    def __init__(self, gate: asyncio.Event | None = None, error: Exception | None = None) -> None:
        self.calls = 0
        self.gate = gate
        self.error = error

    async def __call__(self) -> Any:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return self.calls


# --- the cache ------------------------------------------------------------------------------------


async def test_entries_live_for_the_ttl() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(2.0, clock=clock)
    load = Loader()
    assert await cache.get("a", load) == 1
    clock.now += 1.9
    assert await cache.get("a", load) == 1 and load.calls == 1
    clock.now += 0.2
    assert await cache.get("a", load) == 2 and load.calls == 2


async def test_ttl_zero_never_caches() -> None:
    cache: TtlCache[str, int] = TtlCache(0, clock=Clock())
    load = Loader()
    assert [await cache.get("a", load) for _ in range(3)] == [1, 2, 3]
    assert len(cache) == 0


async def test_concurrent_misses_share_one_load() -> None:
    cache: TtlCache[str, int] = TtlCache(5.0, clock=Clock())
    gate = asyncio.Event()
    load = Loader(gate)
    waiters = [asyncio.create_task(cache.get("a", load)) for _ in range(5)]
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.gather(*waiters) == [1] * 5
    assert load.calls == 1


async def test_failures_are_not_cached() -> None:
    cache: TtlCache[str, int] = TtlCache(5.0, clock=Clock())
    failing = Loader(error=LookupError("no such key"))
    for _ in range(2):
        with pytest.raises(LookupError):
            await cache.get("a", failing)
    assert failing.calls == 2 and len(cache) == 0


async def test_invalidate_disowns_a_load_in_flight() -> None:
    """A read that started before a write must not put the pre-write value back."""
    cache: TtlCache[str, int] = TtlCache(5.0, clock=Clock())
    gate = asyncio.Event()
    stale = asyncio.create_task(cache.get("a", Loader(gate)))
    await asyncio.sleep(0)
    cache.invalidate("a")
    gate.set()
    assert await stale == 1
    fresh = Loader()
    fresh.calls = 41
    assert await cache.get("a", fresh) == 42


async def test_a_cancelled_caller_does_not_cancel_the_shared_load() -> None:
    cache: TtlCache[str, int] = TtlCache(5.0, clock=Clock())
    gate = asyncio.Event()
    load = Loader(gate)
    first = asyncio.create_task(cache.get("a", load))
    second = asyncio.create_task(cache.get("a", load))
    await asyncio.sleep(0)
    first.cancel()
    gate.set()
    assert await second == 1
    assert first.cancelled() and load.calls == 1
    assert await cache.get("a", load) == 1  # and the value was kept


async def test_size_is_bounded_least_recently_used_first() -> None:
    cache: TtlCache[int, int] = TtlCache(5.0, max_entries=3, clock=Clock())
    for key in range(3):
        await cache.get(key, Loader())
    await cache.get(0, Loader())  # touch 0: 1 is now the oldest
    await cache.get(3, Loader())
    reload = Loader()
    await cache.get(1, reload)
    await cache.get(0, reload)
    assert reload.calls == 1 and len(cache) == 3


async def test_access_changed_forgets_principals_and_grants_only() -> None:
    caches = Caches.with_ttl(5.0)
    for cache in (caches.containers, caches.principals):
        await cache.get("k", Loader())
    await caches.grants.get(("u", "s", ("READ_MEMORY",)), Loader())
    caches.access_changed()
    assert (len(caches.containers), len(caches.principals), len(caches.grants)) == (1, 0, 0)


# --- through the real proxy -----------------------------------------------------------------------


OTHER_TTL_S = 1.0


@pytest.fixture(scope="module")
def other_proxy(opensearch_url: str) -> Iterator[ProxyProcess]:
    """A second proxy process on the same node: another replica of a deployment."""
    p = ProxyProcess(opensearch_url, extra_args=["--cache-ttl-s", str(OTHER_TTL_S)])
    yield p
    p.stop()


def _stale_only_within_the_ttl(read: Callable[[], int], fresh: int, cached_by: float) -> None:
    """Polls the other process until ``read()`` answers ``fresh``. Its cache entry was filled by a request
    that ended by ``cached_by`` (time.monotonic: one clock for every process on the host), so the entry
    expires by ``cached_by + OTHER_TTL_S``: a stale answer to a request that *started* after that is a bug,
    however slow or fast the host is. The 120 s deadline only bounds a broken run."""
    stale_started: list[float] = []
    deadline = time.monotonic() + 120
    while True:
        started = time.monotonic()
        if read() == fresh:
            break
        stale_started.append(started)
        assert started < deadline, "the other process never saw the change"
        time.sleep(0.05)
    assert all(s < cached_by + OTHER_TTL_S for s in stale_started), (stale_started, cached_by)


def _search(url: str, container_id: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        f"{url}{MC}/{container_id}/memories/long-term/_semantic_search",
        json={"query": "where does the user live", "k": 5},
        headers=headers,
        timeout=60,
    )


def test_container_delete_is_seen_at_once_here_and_within_the_ttl_elsewhere(
    proxy_url: str, other_proxy: ProxyProcess, admin_headers: dict[str, str]
) -> None:
    created = httpx.post(
        f"{proxy_url}{MC}/_create",
        json={
            "name": f"cache-{uuid.uuid4().hex[:8]}",
            "configuration": {
                "index_prefix": f"cache-{uuid.uuid4().hex[:8]}",
                "embedding_model_type": "TEXT_EMBEDDING",
                "embedding_model_id": EMBEDDER,
                "embedding_dimension": 384,
            },
        },
        headers=admin_headers,
        timeout=60,
    )
    assert created.status_code == 200, created.text
    cid = created.json()["memory_container_id"]
    assert (
        _search(proxy_url, cid, admin_headers).status_code == 200
    )  # both processes now hold the container in their caches
    assert _search(other_proxy.url, cid, admin_headers).status_code == 200
    cached_by = time.monotonic()
    deleted = httpx.delete(
        f"{proxy_url}{MC}/{cid}", params={"delete_all_memories": "true"}, headers=admin_headers, timeout=60
    )
    assert deleted.status_code == 200, deleted.text
    assert _search(proxy_url, cid, admin_headers).status_code == 404  # the deleting process: at once
    _stale_only_within_the_ttl(
        lambda: _search(other_proxy.url, cid, admin_headers).status_code, 404, cached_by
    )


def test_revoked_key_is_refused_at_once_here_and_within_the_ttl_elsewhere(
    proxy_url: str, opensearch_url: str, other_proxy: ProxyProcess
) -> None:
    root = {"x-api-key": root_api_key(proxy_url, opensearch_url)}
    issued = httpx.post(f"{proxy_url}/v1/apikeys", json={"labels": {"t": "cache"}}, headers=root, timeout=30)
    assert issued.status_code == 201, issued.text
    key, key_id = issued.json()["rawApiKey"], issued.json()["apiKeyMetadata"]["apiKeyId"]

    def status(url: str) -> int:
        return httpx.get(f"{url}/v1/spaces", headers={"x-api-key": key}, timeout=30).status_code

    assert status(proxy_url) == 200 and status(other_proxy.url) == 200  # cached in both
    cached_by = time.monotonic()
    revoked = httpx.put(
        f"{proxy_url}/v1/apikeys/{key_id}", json={"status": "INACTIVE"}, headers=root, timeout=30
    )
    assert revoked.status_code == 200, revoked.text
    assert status(proxy_url) == 401
    _stale_only_within_the_ttl(lambda: status(other_proxy.url), 401, cached_by)


@pytest.fixture()
def shared_space(proxy_url: str, admin_key: str) -> Iterator[tuple[httpx.Client, Tenant, Tenant, str, str]]:
    """Alice's space with one memory, bob (no rights yet), and the root client that made them."""
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": admin_key}, timeout=60) as admin:
        alice, bob = make_tenant(admin, "alice"), make_tenant(admin, "bob")
        space = admin.post(
            "/v1/spaces",
            headers=alice.headers,
            json={"name": f"cache-{uuid.uuid4().hex[:8]}", "spaceEmbedders": [{"embedderId": EMBEDDER}]},
        ).json()["spaceId"]
        memory = admin.post(
            "/v1/memories", headers=alice.headers, json={"spaceId": space, "originalContent": "shared"}
        ).json()["memoryId"]
        yield admin, alice, bob, space, memory
        admin.delete(f"/v1/spaces/{space}")


def _read_status(url: str, memory_id: str, tenant: Tenant) -> int:
    return httpx.get(f"{url}/v1/memories/{memory_id}", headers=tenant.headers, timeout=30).status_code


def test_revoked_grant_is_refused_at_once_here_and_within_the_ttl_elsewhere(
    proxy_url: str, other_proxy: ProxyProcess, shared_space: tuple[httpx.Client, Tenant, Tenant, str, str]
) -> None:
    admin, alice, bob, space, memory = shared_space
    rule = {
        "operation": "READ_MEMORY",
        "selector": "EXACT",
        "assignedResource": {"kind": "SPACE", "resourceId": space},
    }
    grant = admin.post(
        "/v1/access-policy/grants",
        headers=alice.headers,
        json={"audience": {"principalId": bob.user_id}, "rule": rule},
    )
    assert grant.status_code == 201, grant.text
    assert _read_status(proxy_url, memory, bob) == _read_status(other_proxy.url, memory, bob) == 200
    cached_by = time.monotonic()
    revoked = admin.delete(f"/v1/access-policy/grants/{grant.json()['grantId']}", headers=alice.headers)
    assert revoked.status_code == 200, revoked.text
    assert _read_status(proxy_url, memory, bob) == 403
    _stale_only_within_the_ttl(lambda: _read_status(other_proxy.url, memory, bob), 403, cached_by)


def test_deleted_user_is_refused_at_once_here_and_within_the_ttl_elsewhere(
    proxy_url: str, other_proxy: ProxyProcess, shared_space: tuple[httpx.Client, Tenant, Tenant, str, str]
) -> None:
    admin, alice, _, _, memory = shared_space
    assert _read_status(proxy_url, memory, alice) == _read_status(other_proxy.url, memory, alice) == 200
    cached_by = time.monotonic()
    assert admin.delete(f"/v1/users/{alice.user_id}").status_code in (200, 204)
    assert _read_status(proxy_url, memory, alice) == 401
    _stale_only_within_the_ttl(lambda: _read_status(other_proxy.url, memory, alice), 401, cached_by)


def test_public_read_turned_off_is_refused_at_once_here_and_within_the_ttl_elsewhere(
    proxy_url: str, other_proxy: ProxyProcess, shared_space: tuple[httpx.Client, Tenant, Tenant, str, str]
) -> None:
    admin, alice, bob, space, memory = shared_space
    assert (
        admin.put(f"/v1/spaces/{space}", headers=alice.headers, json={"publicRead": True}).status_code == 200
    )
    assert _read_status(proxy_url, memory, bob) == 200
    # The other process may have cached the space from before it was public: wait for it to see it.
    _stale_only_within_the_ttl(lambda: _read_status(other_proxy.url, memory, bob), 200, time.monotonic())
    cached_by = time.monotonic()
    assert (
        admin.put(f"/v1/spaces/{space}", headers=alice.headers, json={"publicRead": False}).status_code == 200
    )
    assert _read_status(proxy_url, memory, bob) == 403
    _stale_only_within_the_ttl(lambda: _read_status(other_proxy.url, memory, bob), 403, cached_by)


def test_container_update_reaches_other_processes_within_the_ttl(
    proxy_url: str, other_proxy: ProxyProcess, shared_space: tuple[httpx.Client, Tenant, Tenant, str, str]
) -> None:
    """An ml-commons update of the container is what a GoodMem reader elsewhere sees after at most the
    TTL."""
    admin, alice, _, space, _ = shared_space

    def name(url: str) -> int:
        got = httpx.get(f"{url}/v1/spaces/{space}", headers=alice.headers, timeout=30).json()["name"]
        return 1 if got == "renamed" else 0

    assert name(proxy_url) == name(other_proxy.url) == 0
    cached_by = time.monotonic()
    assert admin.put(f"{MC}/{space}", headers=alice.headers, json={"name": "renamed"}).status_code == 200
    assert name(proxy_url) == 1
    _stale_only_within_the_ttl(lambda: name(other_proxy.url), 1, cached_by)
