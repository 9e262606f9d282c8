"""No request can stall the others (issue 24, item 5), against the real proxy on a real node.

While tenant A sends each kind of hostile request, ``/_memproxy/health`` is polled and tenant B retrieves
from its own space; both must answer within 1 s at p99 (the figures are printed: ``pytest -s``):

* **huge spaceKeys**: 3 000 copies of A's own space in one retrieve (a 400 naming ``max_space_keys``);
* **huge filters**: eight 94 000-character filters (a 400 naming ``max_filter_chars``), and retrieves with the
  most filter text a request may carry (32 KiB, parsed on a worker thread);
* **PDF bombs**: 1.7 KB PDFs whose forms draw a leaf 12^5 times, uploaded as documents: their jobs fail at
  once naming ``document_max_draws``, and B's document, queued behind them, is processed meanwhile;
* **slowloris**: 150 connections that never finish their request head and 30 whose body stalls: all closed
  by the proxy within its deadlines (``--header-timeout-s``/``--body-timeout-s``, 3 s here).

The module runs its own proxy, with short read deadlines so that the test takes about a minute.
"""

from __future__ import annotations

import base64
import json
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.adversarial.health import HealthPoller
from tests.adversarial.tenants import Tenant, make_tenant
from tests.conftest import ProxyProcess
from tests.goodmem_helpers import root_api_key
from tests.support.documents import form_bomb_pdf, text_pdf

pytestmark = pytest.mark.timeout(300)

EMBEDDER = "7cee535f-87b7-58aa-9a5a-d51cea8a2f1d"
DEADLINE_S = 3.0
BOUND_S = {"health": 1.0, "retrieve": 1.5}


@dataclass
class World:
    proxy: ProxyProcess
    admin: httpx.Client
    a: Tenant
    b: Tenant
    space_a: str
    space_a2: str
    space_b: str


def _space(admin: httpx.Client, tenant: Tenant) -> str:
    made = admin.post(
        "/v1/spaces",
        headers=tenant.headers,
        json={"name": f"stall-{uuid.uuid4().hex[:8]}", "spaceEmbedders": [{"embedderId": EMBEDDER}]},
    )
    assert made.status_code in (200, 201), made.text
    return str(made.json()["spaceId"])


@pytest.fixture(scope="module")
def world(opensearch_url: str) -> Iterator[World]:
    # Workers enough to take every job it enqueues at once: the node is shared with other memproxy
    # processes (other checkouts' tests), and a job left past the hand-off delay could be run by one of them.
    deadlines = ["--header-timeout-s", str(DEADLINE_S), "--body-timeout-s", str(DEADLINE_S)]
    proxy = ProxyProcess(opensearch_url, [*deadlines, "--jobs-workers", "6", "--jobs-max-per-owner", "4"])
    try:
        key = root_api_key(proxy.url, opensearch_url)
        with httpx.Client(base_url=proxy.url, headers={"x-api-key": key}, timeout=120) as admin:
            a, b = make_tenant(admin, "stall-attacker"), make_tenant(admin, "stall-neighbour")
            space_a, space_a2, space_b = _space(admin, a), _space(admin, a), _space(admin, b)
            for text in ("the neighbour likes oolong tea", "the neighbour walks the dog at seven"):
                made = admin.post(
                    "/v1/memories", headers=b.headers, json={"spaceId": space_b, "originalContent": text}
                )
                assert made.status_code == 201, made.text
            yield World(proxy, admin, a, b, space_a, space_a2, space_b)
    finally:
        proxy.stop()


def _retrieve_body(space_keys: list[dict[str, Any]]) -> bytes:
    return json.dumps({"message": "which tea", "spaceKeys": space_keys, "requestedSize": 5}).encode()


class Neighbour:
    """Tenant B's retrieves of its own space, one after another on its own thread, each timed (a failure
    counts as 10 s)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.body = _retrieve_body([{"spaceId": world.space_b}])

    def _run(self) -> None:
        headers = {
            **self.world.b.headers,
            "Accept": "application/x-ndjson",
            "Content-Type": "application/json",
        }
        with httpx.Client(base_url=self.world.proxy.url, timeout=10) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    answer = client.post("/v1/memories:retrieve", headers=headers, content=self.body)
                    ok = answer.status_code == 200 and "retrievedItem" in answer.text
                except httpx.HTTPError:
                    ok = False
                self.latencies.append(time.perf_counter() - started if ok else 10.0)
                self._stop.wait(0.1)

    def __enter__(self) -> Neighbour:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def under_load(world: World, name: str, attack: Callable[[], None]) -> None:
    """Run ``attack`` while health and B's retrieves are measured; print and check their p50/p99."""
    with HealthPoller(world.proxy.url) as health, Neighbour(world) as neighbour:
        time.sleep(0.3)
        attack()
        time.sleep(0.3)
    figures = {"health": health.latencies, "retrieve": neighbour.latencies}
    print(
        f"\n{name}: "
        + "; ".join(
            f"{what} {len(xs)} calls, p50 {statistics.median(xs) * 1000:.0f} ms, "
            f"p99 {_p(xs, 0.99) * 1000:.0f} ms, max {max(xs) * 1000:.0f} ms"
            for what, xs in figures.items()
        )
    )
    # Health must stay under 1 s. B's retrieve embeds its message on the CPU the hostile load and five other
    # test suites share (2 cores): idle, its p99 here is 0.2-0.6 s, so it is allowed 1.5 s.
    for what, xs in figures.items():
        assert len(xs) >= 5, (name, what, xs)
        assert _p(xs, 0.99) < BOUND_S[what], (name, what, sorted(xs)[-5:])


def _hostile(world: World, bodies: list[bytes], seconds: float, threads: int = 2) -> list[int]:
    """A's retrieves of ``bodies``, round and round from ``threads`` threads for ``seconds``, each thread
    pausing 50 ms between two (a steady stream of hostile requests, not a flood: what one request costs the
    others is measured, not the machine's throughput); their statuses."""
    statuses: list[int] = []
    until = time.monotonic() + seconds
    headers = {**world.a.headers, "Accept": "application/x-ndjson", "Content-Type": "application/json"}

    def loop(offset: int) -> None:
        with httpx.Client(base_url=world.proxy.url, timeout=60) as client:
            i = offset
            while time.monotonic() < until:
                answer = client.post(
                    "/v1/memories:retrieve", headers=headers, content=bodies[i % len(bodies)]
                )
                statuses.append(answer.status_code)
                i += 1
                time.sleep(0.05)

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    return statuses


def test_baseline(world: World) -> None:
    under_load(world, "no attack", lambda: time.sleep(5))


def test_huge_space_keys(world: World) -> None:
    body = _retrieve_body([{"spaceId": world.space_a}] * 3000)
    statuses: list[int] = []
    under_load(world, "3000 spaceKeys", lambda: statuses.extend(_hostile(world, [body], 6.0)))
    assert statuses and set(statuses) == {400}, statuses[:20]
    answer = world.admin.post("/v1/memories:retrieve", headers=world.a.headers, content=body)
    assert answer.status_code == 400 and "max_space_keys" in answer.json()["error"], answer.text


def _filter(length: int, tag: str) -> str:
    """A valid expression of about ``length`` characters: 250 comparisons (the node's query may hold at
    most 1024 clauses), then an IN list of ids filling the rest."""
    clauses = " OR ".join(f"CAST(val('$.{tag}{i}') AS TEXT) = 'v'" for i in range(250))
    ids = ", ".join(f"'{uuid.UUID(int=i)}'" for i in range(length // 40))
    text = f"({clauses}) AND CAST(val('$.{tag}id') AS TEXT) IN ({ids})"
    return text[: text.rindex(", ", 0, length - 1)] + ")"


def test_huge_filters(world: World) -> None:
    spaces = [world.space_a, world.space_a2, *(str(uuid.uuid4()) for _ in range(6))]
    huge = _retrieve_body(
        [{"spaceId": sid, "filter": _filter(94_000, f"h{i}_")} for i, sid in enumerate(spaces)]
    )
    # The most a request may carry: 32 KiB of valid filters, which the proxy does parse (off the loop).
    legal = [
        _retrieve_body(
            [
                {"spaceId": space, "filter": _filter(16_000, f"r{r}s{n}_")}
                for n, space in enumerate((world.space_a, world.space_a2))
            ]
        )
        for r in range(8)
    ]
    statuses: list[int] = []
    under_load(world, "huge filters", lambda: statuses.extend(_hostile(world, [huge, *legal], 8.0)))
    assert 400 in statuses and 200 in statuses and set(statuses) <= {200, 400}, statuses
    answer = world.admin.post("/v1/memories:retrieve", headers=world.a.headers, content=huge)
    assert answer.status_code == 400 and "max_filter_chars" in answer.json()["error"], answer.text


def _memory(world: World, tenant: Tenant, space: str, pdf: bytes) -> str:
    body = {
        "spaceId": space,
        "originalContentB64": base64.b64encode(pdf).decode(),
        "contentType": "application/pdf",
    }
    made = world.admin.post("/v1/memories", headers=tenant.headers, json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["memoryId"])


def _state(world: World, memory_id: str) -> dict[str, Any]:
    got = world.admin.get(f"/v1/memories/{memory_id}", params={"includeProcessingHistory": "true"})
    assert got.status_code == 200, got.text
    return dict(got.json())


def test_pdf_bombs(world: World) -> None:
    """A's bombs fail at once with the reason, and B's document, queued after them, is processed meanwhile
    (the turns of jobs across owners are tested in tests/test_jobs.py)."""
    bomb = form_bomb_pdf(4)
    assert len(bomb) < 2500
    bombs: list[str] = []
    mine: list[str] = []
    took: dict[str, float] = {}

    def attack() -> None:
        started = time.monotonic()
        bombs.extend(_memory(world, world.a, world.space_a, bomb) for _ in range(4))
        mine.append(_memory(world, world.b, world.space_b, text_pdf(["the neighbour's own document"])))
        pending = {*bombs, *mine}
        while pending and time.monotonic() - started < 60:
            for memory_id in list(pending):
                if _state(world, memory_id)["processingStatus"] in ("COMPLETED", "FAILED"):
                    took[memory_id] = time.monotonic() - started
                    pending.discard(memory_id)
            time.sleep(0.5)

    under_load(world, "PDF bombs (4 x 12^5 drawings) and a neighbour's document", attack)
    print(
        "PDF bombs ended FAILED after "
        + ", ".join(f"{took.get(m, -1):.1f}" for m in bombs)
        + f" s; B's document COMPLETED after {took.get(mine[0], -1):.1f} s"
    )
    for memory_id in bombs:
        memory = _state(world, memory_id)
        assert memory["processingStatus"] == "FAILED", memory
        error = memory["processingHistory"]["latestJob"]["lastError"]
        assert "draws more than 2000 objects on page 1 (document_max_draws)" in error, error
    assert _state(world, mine[0])["processingStatus"] == "COMPLETED"
    # Unbounded, pypdf spends minutes on each bomb (its own cap, 5 000 forms a page, still takes ~10 s).
    assert max(took.values()) < 20, took


def _open(world: World) -> socket.socket:
    parts = urlsplit(world.proxy.url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    sock.setblocking(True)
    return sock


def _closed(sock: socket.socket) -> bool:
    """Whether the proxy closed ``sock`` (EOF or a reset); it has nothing to read otherwise."""
    sock.settimeout(0.01)
    try:
        return sock.recv(4096) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_slowloris(world: World) -> None:
    socks: list[socket.socket] = []
    closed_after: list[float] = []

    def attack() -> None:
        started = time.monotonic()
        for i in range(150):  # heads that never end
            sock = _open(world)
            sock.sendall(f"POST /v1/memories:retrieve HTTP/1.1\r\nHost: x\r\nX-Slow-{i}: ".encode())
            socks.append(sock)
        for _ in range(30):  # a body that stops after 10 of its 1000 bytes
            sock = _open(world)
            sock.sendall(
                f"POST /v1/memories:retrieve HTTP/1.1\r\nHost: x\r\nx-api-key: {world.a.key}\r\n"
                'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"message"'.encode()
            )
            socks.append(sock)
        while time.monotonic() - started < DEADLINE_S + 4 and len(closed_after) < len(socks):
            for sock in socks:
                if sock.fileno() != -1 and _closed(sock):
                    sock.close()
                    closed_after.append(time.monotonic() - started)
            time.sleep(0.1)
        for sock in socks:
            sock.close()

    under_load(world, "slowloris (150 unfinished heads, 30 stalled bodies)", attack)
    last = max(closed_after, default=0)
    print(f"slowloris: {len(closed_after)} of {len(socks)} closed by the proxy, the last after {last:.1f} s")
    assert len(closed_after) == len(socks), (len(closed_after), len(socks))
    assert max(closed_after) < DEADLINE_S + 3
