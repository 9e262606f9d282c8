"""memproxy never lends its own identity to a caller: not the credentials written into ``--opensearch-url``,
not its client certificate, not a caller's memproxy key; and health shows neither.

Between memproxy and the real node sits a recording relay (a few lines of aiohttp, over TLS with client
certificates for the mutual-TLS case) that notes, for every request it relays, the ``Authorization`` header
and whether a client certificate was presented. memproxy's own calls must carry its identity (the positive
control); forwarded callers' requests must not.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import pytest
from aiohttp import web

from tests.conftest import ProxyProcess, free_port

pytestmark = pytest.mark.timeout(300)

URL_PASSWORD = "s3cret-url-pw"


@dataclass
class Seen:
    path: str
    authorization: str | None
    api_key: str | None
    client_cert: bool


@dataclass
class Relay:
    """A recording relay in front of the real node, on its own thread and loop."""

    upstream: str
    ssl_context: ssl.SSLContext | None = None
    port: int = field(default_factory=free_port)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(30)

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context else "http"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession()  # answers decompressed: relayed without an encoding
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._relay)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self.ssl_context).start()

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        self.seen.append(
            Seen(
                request.path,
                request.headers.get("Authorization"),
                request.headers.get("x-api-key"),
                bool(cert),
            )
        )
        # The node has no security: what memproxy sent is recorded, not checked, and never passed on.
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=await request.read(), headers=headers
        ) as resp:
            body = await resp.read()
            return web.Response(body=body, status=resp.status, content_type=resp.content_type)

    def requests_to(self, path: str) -> list[Seen]:
        # Below ``path`` too: an index-less view such as /_cat/indices is forwarded onto an expression that
        # leaves memproxy's own indices out (/_cat/indices/*,-memproxy-goodmem-*,...).
        return [s for s in self.seen if s.path == path or s.path.startswith(path + "/")]

    def stop(self) -> None:
        async def shutdown() -> None:
            await self._session.close()
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"))  # fmt: skip
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, ext in (("server", ["-extfile", str(d / "san.cnf")]), ("client", [])):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"))  # fmt: skip
        _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.pem"),
                 "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "2",
                 "-out", str(d / f"{name}.pem"), *ext)  # fmt: skip
    return d


@pytest.fixture()
def relay(opensearch_url: str) -> Iterator[Relay]:
    r = Relay(opensearch_url)
    yield r
    r.stop()


def test_credentials_in_the_url_are_memproxys_own_and_never_forwarded(relay: Relay) -> None:
    url = f"http://memuser:{URL_PASSWORD}@127.0.0.1:{relay.port}"
    proxy = ProxyProcess(url, extra_args=["--auth", "none"])
    try:
        health = httpx.get(proxy.url + "/_memproxy/health", timeout=30)
        assert health.json()["cluster"]["status"] in ("green", "yellow")
        assert URL_PASSWORD not in health.text and "memuser" not in health.text
        own = relay.requests_to("/_cluster/health")
        assert own and all(s.authorization and s.authorization.startswith("Basic ") for s in own)  # control
        answer = httpx.get(proxy.url + "/_cat/indices", timeout=30)  # an anonymous caller's request
        assert answer.status_code == 200
        forwarded = relay.requests_to("/_cat/indices")
        assert forwarded and all(s.authorization is None for s in forwarded)
        assert URL_PASSWORD not in proxy.log()
    finally:
        proxy.stop()


def test_a_callers_memproxy_key_is_not_forwarded(relay: Relay, admin_key: str) -> None:
    proxy = ProxyProcess(f"http://127.0.0.1:{relay.port}")
    try:
        for headers in ({"x-api-key": admin_key}, {"Authorization": f"Bearer {admin_key}"}):
            assert httpx.get(proxy.url + "/_cat/health", headers=headers, timeout=30).status_code == 200
        forwarded = relay.requests_to("/_cat/health")
        assert len(forwarded) == 2
        assert all(s.authorization is None and s.api_key is None for s in forwarded)
    finally:
        proxy.stop()


def test_the_client_certificate_is_never_presented_for_a_caller(opensearch_url: str, pki: Path) -> None:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki / "server.pem", pki / "server.key")
    ctx.load_verify_locations(pki / "ca.pem")
    ctx.verify_mode = ssl.CERT_OPTIONAL  # record whether one was presented; require none
    relay = Relay(opensearch_url, ssl_context=ctx)
    proxy = ProxyProcess(
        f"https://127.0.0.1:{relay.port}",
        extra_args=[
            "--auth",
            "none",
            "--opensearch-ca-certs",
            str(pki / "ca.pem"),
            "--opensearch-client-cert",
            str(pki / "client.pem"),
            "--opensearch-client-key",
            str(pki / "client.key"),
        ],
    )
    try:
        assert httpx.get(proxy.url + "/_memproxy/health", timeout=30).json()["status"] == "ok"
        own = relay.requests_to("/_cluster/health")
        assert own and all(s.client_cert for s in own)  # memproxy's own calls: its certificate (control)
        assert httpx.get(proxy.url + "/_cat/indices", timeout=30).status_code == 200
        forwarded = relay.requests_to("/_cat/indices")
        assert forwarded and not any(s.client_cert for s in forwarded)
    finally:
        proxy.stop()
        relay.stop()
