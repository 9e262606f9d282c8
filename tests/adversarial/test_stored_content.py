"""Stored content is safe to serve: a memory's ``contentType`` is a media type or a 400 (create, batch create,
multipart), every download carries ``nosniff`` and a sandboxing CSP, active types come as attachments, a
record stored before the check still downloads; and anonymous health shows counts, not other tenants' ids.

Real proxy, real node, a non-admin tenant (issue 24, item 7)."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.adversarial.tenants import Tenant, make_tenant

pytestmark = pytest.mark.timeout(300)

EMBEDDER = "7cee535f-87b7-58aa-9a5a-d51cea8a2f1d"  # the start-up local embedder's GoodMem id
MEMORIES_INDEX = "memproxy-goodmem-memories"
SANDBOX = "sandbox; default-src 'none'"
# Not media types: header injection, controls, junk, an unbounded length.
BAD_TYPES = [
    "text/plain\r\nSet-Cookie: owned=1",
    "text/html\nX-Injected: 1",
    "text/plain\r",
    "text/plain\x00",
    "text/plain\x7f",
    "text/pl ain",
    "text/",
    "/plain",
    "plain",
    "text/plain; charset",
    "text/plain; =utf-8",
    'text/plain; charset="utf-8',
    "text/plain\u00e9",
    "text/" + "x" * 300,
]


@dataclass(frozen=True)
class Setup:
    admin: httpx.Client
    tenant: Tenant
    client: httpx.Client
    space_id: str


@pytest.fixture(scope="module")
def setup(proxy_url: str, admin_key: str) -> Iterator[Setup]:
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": admin_key}, timeout=120) as admin:
        tenant = make_tenant(admin, "content")
        with httpx.Client(base_url=proxy_url, headers=tenant.headers, timeout=120) as client:
            space = client.post(
                "/v1/spaces",
                json={
                    "name": f"content-{uuid.uuid4().hex[:6]}",
                    "spaceEmbedders": [{"embedderId": EMBEDDER}],
                },
            )
            assert space.status_code in (200, 201), space.text
            yield Setup(admin, tenant, client, space.json()["spaceId"])
            client.delete(f"/v1/spaces/{space.json()['spaceId']}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _goodmem_400(resp: httpx.Response) -> str:
    assert resp.status_code == 400, (resp.status_code, resp.text)
    body = resp.json()
    assert body["status"] == 400 and isinstance(body["error"], str), body
    return str(body["error"])


@pytest.mark.parametrize("content_type", BAD_TYPES, ids=range(len(BAD_TYPES)))
def test_a_bad_content_type_is_refused_at_create_and_batch(setup: Setup, content_type: str) -> None:
    item = {"spaceId": setup.space_id, "originalContentB64": _b64(b"hello"), "contentType": content_type}
    assert "media type" in _goodmem_400(setup.client.post("/v1/memories", json=item))
    text_item = {"spaceId": setup.space_id, "originalContent": "hello", "contentType": content_type}
    assert "media type" in _goodmem_400(setup.client.post("/v1/memories", json=text_item))
    batch = setup.client.post("/v1/memories:batchCreate", json={"requests": [item]})
    assert batch.status_code in (200, 207), batch.text
    [result] = batch.json()["results"]
    assert result.get("error", {}).get("code") == 400 and "media type" in result["error"]["message"], result


def test_a_bad_content_type_is_refused_in_multipart(setup: Setup) -> None:
    request = f'{{"spaceId": "{setup.space_id}"}}'
    for content_type in ("text/html\r\nX-Injected: 1", "text/plain; charset", "nonsense"):
        # Built by hand: the multipart part's own Content-Type header carries the bad value.
        boundary = uuid.uuid4().hex
        body = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="request"\r\n'
            f"Content-Type: application/json\r\n\r\n{request}\r\n"
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n'
            f"Content-Type: {content_type}\r\n\r\nhello\r\n--{boundary}--\r\n"
        ).encode()
        resp = setup.client.post(
            "/v1/memories",
            content=body,
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
        # A CR/LF in a part header splits it into two headers: the type left is a bare "text/html" plus an
        # unknown header, accepted as such; what matters is that nothing stored carries a CR or LF.
        if resp.status_code in (200, 201):
            got = setup.client.get(f"/v1/memories/{resp.json()['memoryId']}")
            assert "\r" not in got.json()["contentType"] and "\n" not in got.json()["contentType"]
        else:
            assert "media type" in _goodmem_400(resp)


def _create(setup: Setup, data: bytes, content_type: str) -> str:
    resp = setup.client.post(
        "/v1/memories",
        json={"spaceId": setup.space_id, "originalContentB64": _b64(data), "contentType": content_type},
    )
    assert resp.status_code in (200, 201), resp.text
    return str(resp.json()["memoryId"])


ACTIVE = [
    ("text/html", b"<html><script>alert(document.cookie)</script></html>"),
    ("image/svg+xml", b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>'),
    ("application/xhtml+xml", b'<html xmlns="http://www.w3.org/1999/xhtml"><script>alert(1)</script></html>'),
    ("text/xml", b"<a>1</a>"),
    ("application/javascript", b"alert(1)"),
    ("TEXT/HTML; charset=utf-8", b"<script>alert(1)</script>"),
]


@pytest.mark.parametrize(("content_type", "data"), ACTIVE, ids=[a[0] for a in ACTIVE])
def test_active_content_downloads_as_a_sandboxed_attachment(
    setup: Setup, content_type: str, data: bytes
) -> None:
    memory_id = _create(setup, data, content_type)
    got = setup.client.get(f"/v1/memories/{memory_id}/content")
    assert got.status_code == 200 and got.content == data
    assert got.headers["content-disposition"] == "attachment"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-security-policy"] == SANDBOX
    ranged = setup.client.get(f"/v1/memories/{memory_id}/content", headers={"Range": "bytes=0-3"})
    assert ranged.status_code == 206 and ranged.headers["content-disposition"] == "attachment"


def test_passive_content_is_inline_but_still_nosniff_and_sandboxed(setup: Setup) -> None:
    memory_id = _create(setup, b"just words", "text/plain; charset=utf-8")
    got = setup.client.get(f"/v1/memories/{memory_id}/content")
    assert got.status_code == 200 and got.headers["content-type"] == "text/plain; charset=utf-8"
    assert "content-disposition" not in got.headers
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-security-policy"] == SANDBOX


def test_a_record_stored_with_a_bad_type_still_downloads_as_octet_stream(
    setup: Setup, opensearch_url: str
) -> None:
    """A record written before the check (here: rewritten on the node) is served, never a dropped
    connection."""
    memory_id = _create(setup, b"<script>alert(1)</script>", "text/plain")
    with httpx.Client(base_url=opensearch_url, timeout=60) as node:
        found = node.post(
            f"/{MEMORIES_INDEX}/_search", json={"query": {"term": {"memory_id": memory_id}}, "size": 1}
        )
        [hit] = found.json()["hits"]["hits"]
        updated = node.post(
            f"/{hit['_index']}/_update/{hit['_id']}",
            params={"refresh": "true"},
            json={"doc": {"content_type": "text/html\r\nSet-Cookie: owned=1"}},
        )
        assert updated.status_code == 200, updated.text
    time.sleep(2.5)  # past the proxy's read cache (--cache-ttl-s, 2 s by default)
    got = setup.client.get(f"/v1/memories/{memory_id}/content")
    assert got.status_code == 200 and got.content == b"<script>alert(1)</script>"
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["content-disposition"] == "attachment"
    assert "set-cookie" not in got.headers
    assert got.headers["x-content-type-options"] == "nosniff"


def test_anonymous_health_shows_counts_not_failed_jobs(setup: Setup, proxy_url: str) -> None:
    # A document that cannot be read: its job fails, with this tenant's memory id and an error text.
    memory_id = _create(setup, b"%PDF-1.4 not really a pdf " + uuid.uuid4().bytes, "application/pdf")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        admin_view = setup.admin.get("/_memproxy/health").json()["jobs"]
        if memory_id in str(admin_view.get("recent_failures")):
            break
        time.sleep(1)
    else:
        pytest.fail(f"the job of {memory_id} did not fail in time: {admin_view}")
    anonymous = httpx.get(f"{proxy_url}/_memproxy/health", timeout=30)
    assert anonymous.status_code == 200
    jobs = anonymous.json()["jobs"]
    assert "recent_failures" not in jobs and jobs["recent_failures_count"] >= 1
    assert isinstance(jobs["counts"], dict)
    assert memory_id not in anonymous.text
    # A tenant's key, or a wrong one, is no administrator: counts only too.
    for headers in (setup.tenant.headers, {"x-api-key": "not-a-key"}):
        other = httpx.get(f"{proxy_url}/_memproxy/health", headers=headers, timeout=30)
        assert other.status_code == 200 and memory_id not in other.text
        assert "recent_failures" not in other.json()["jobs"]
